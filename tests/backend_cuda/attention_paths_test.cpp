// Each CUDA attention path, forced in turn with ANVIL_CUDA_ATTENTION, through the op
// conformance driver: forward (out and lse) and backward (dq, dk, dv) on cuda against cpu-ref
// (f32 arithmetic on the same bf16 inputs) and the double-precision oracle, with finite
// differences at 16 coordinates per gradient. The tolerance is the conformance suite's for bf16
// attention: peak-relative error 2e-2 (bf16 keeps 8 significant bits, so inputs, P and dS
// rounded to bf16 give errors of a few 1e-3; 2e-2 leaves room for long sums, and a wrong mask
// or a missing rescale gives errors of order 1). Every row also checks that the forced path
// served its forward and backward. Rows: every mask cuDNN takes (causal, full, sliding window,
// key blocks placed by offsets, decoding), GQA 2:1 and 4:1, head dims 64 and 128, sequence
// lengths that are not multiples of the 64-row tiles; and for the tensor-core kernels also
// documents, sinks, strided and lines patterns, and rows that see no key. Without a GPU every
// test skips with the reason; without cuDNN the cuDNN test skips with the loader's reason.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "backend/cuda/attention_route.h"
#include "backend/cuda/cuda_device.h"
#include "backend/cuda/cudnn_library.h"

namespace anvil::test {
namespace {

using cuda::AttentionPath;

// Sets ANVIL_CUDA_ATTENTION for the scope's lifetime.
class ForcedPath {
 public:
  explicit ForcedPath(const char* value) { setenv("ANVIL_CUDA_ATTENTION", value, 1); }
  ~ForcedPath() { unsetenv("ANVIL_CUDA_ATTENTION"); }
};

const DType bf16 = DType::bf16;

// Rows whose mask is a band: cuDNN can take them, and so can every other path.
std::vector<AttentionRow> band_rows() {
  return {
      {2, 130, 4, 2, 64, true, 0, {}, 0.0f, bf16},     // causal, GQA 2:1, tail tile
      {1, 100, 4, 1, 128, true, 0, {}, 0.0f, bf16},    // causal, GQA 4:1, D = 128
      {1, 96, 2, 2, 64, false, 0, {}, 0.3f, bf16},     // full, custom scale
      {1, 150, 2, 1, 128, true, 40, {}, 0.0f, bf16},   // sliding window
      {1, 120, 2, 1, 64, false, 30, {}, 0.0f, bf16},   // two-sided window
      key_block({1, 64, 2, 1, 64, true, 0, {}, 0.0f, bf16}, 128, 0, 64),   // keys wholly before
      key_block({1, 70, 4, 2, 64, true, 0, {}, 0.0f, bf16}, 40, 20, 90),  // shifted diagonal
      key_block({1, 5, 4, 2, 128, true, 0, {}, 0.0f, bf16}, 65, 0, 70),   // decoding
  };
}

// Rows only anvil's kernels take.
std::vector<AttentionRow> other_rows() {
  const AttentionRow base{1, 160, 2, 1, 64, true, 0, {}, 0.0f, bf16};
  return {
      {1, 130, 4, 2, 64, true, 0, runs_of_documents(130, 50), 0.0f, bf16},
      {1, 140, 2, 2, 128, false, 0, runs_of_documents(140, 45), 0.0f, bf16},
      masked(base, SparsePattern::lines, 16, 0, 0),
      masked(base, SparsePattern::lines, 64, 0, 0),
      masked(base, SparsePattern::strided, 32, 2, 0),
      masked({1, 150, 2, 1, 128, true, 20, {}, 0.0f, bf16}, SparsePattern::dense, 0, 0, 5),
      masked({1, 130, 2, 2, 64, true, 0, runs_of_documents(130, 50), 0.0f, bf16},
             SparsePattern::lines, 8, 0, 3),
      key_block(base, 0, 160, 64),  // every key after every query: out 0, lse -inf
      key_block({1, 50, 2, 1, 64, true, 0, runs_of_documents(200, 70), 0.0f, bf16}, 130, 37,
                80),
  };
}

// Runs `rows` on cuda with ANVIL_CUDA_ATTENTION=`value`, checking that `path` served each.
void run_on_path(const char* value, AttentionPath path, const std::vector<AttentionRow>& rows) {
  const ForcedPath forced(value);
  for (const AttentionRow& row : rows) {
    OpCase c = attention_case(row);
    c.backends = {"cuda"};
    c.max_fd_coordinates = 16;
    const uint64_t before = cuda::attention_calls_served(path);
    run_op_case(c);
    EXPECT_GE(cuda::attention_calls_served(path) - before, 2u)
        << c.label << ": the " << cuda::attention_path_name(path)
        << " path did not serve both the forward and the backward";
  }
}

class CudaAttentionPaths : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string reason = cuda::device_unavailable_reason();
    if (!reason.empty()) GTEST_SKIP() << reason;
  }
};

TEST_F(CudaAttentionPaths, Cudnn) {
  const cuda::CudnnLibrary& library = cuda::load_cudnn_library();
  if (library.handle == nullptr) GTEST_SKIP() << "cuDNN not loadable: " << library.error;
  run_on_path("cudnn", AttentionPath::cudnn, band_rows());
}

TEST_F(CudaAttentionPaths, TensorCore) {
  std::vector<AttentionRow> rows = band_rows();
  for (const AttentionRow& row : other_rows()) rows.push_back(row);
  run_on_path("tensor-core", AttentionPath::tensor_core, rows);
}

TEST_F(CudaAttentionPaths, CudaCores) {
  const std::vector<AttentionRow> band = band_rows(), other = other_rows();
  run_on_path("simt", AttentionPath::simt, {band[0], band[3], other[0], other[2]});
}

TEST_F(CudaAttentionPaths, AutomaticRoutingPicksTheFastestPathThatFits) {
  // A document mask never goes to cuDNN; a causal bf16 call does when cuDNN is loaded.
  const bool cudnn_loaded = cuda::load_cudnn_library().handle != nullptr;
  run_on_path("auto", AttentionPath::tensor_core, {other_rows()[0]});
  run_on_path("auto", cudnn_loaded ? AttentionPath::cudnn : AttentionPath::tensor_core,
              {band_rows()[0]});
}

}  // namespace
}  // namespace anvil::test
