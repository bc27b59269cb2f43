// The host side of CUDA attention routing (attention_route.h) and of loading cuDNN
// (cudnn_library.h), which run without a GPU: the ANVIL_CUDA_ATTENTION values, the path chosen
// for each kind of call, what the tensor-core kernels and cuDNN are offered, where libcudnn is
// looked for, and loading the toolkit's libcudnn here when it is installed. The kernels behind
// each path are checked on a GPU by attention_paths_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/attention.h"
#include "backend/cuda/attention_route.h"
#include "backend/cuda/cudnn_attention.h"
#include "backend/cuda/cudnn_library.h"
#include "backend/cuda/cuda_device.h"
#include "core/error.h"

namespace anvil::cuda {
namespace {

TEST(AttentionRoute, ParsesThePreference) {
  EXPECT_EQ(parse_attention_preference(nullptr), AttentionPreference::automatic);
  EXPECT_EQ(parse_attention_preference(""), AttentionPreference::automatic);
  EXPECT_EQ(parse_attention_preference("auto"), AttentionPreference::automatic);
  EXPECT_EQ(parse_attention_preference("cudnn"), AttentionPreference::cudnn);
  EXPECT_EQ(parse_attention_preference("tensor-core"), AttentionPreference::tensor_core);
  EXPECT_EQ(parse_attention_preference("simt"), AttentionPreference::simt);
  try {
    parse_attention_preference("fast");
    FAIL() << "an unknown value must be refused";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("ANVIL_CUDA_ATTENTION"), std::string::npos) << message;
    EXPECT_NE(message.find("'fast'"), std::string::npos) << message;
  }
}

TEST(AttentionRoute, ChoosesThePath) {
  AttentionCallTraits band_and_tc;
  band_and_tc.cudnn_band = DiagonalBand{0, std::nullopt};
  band_and_tc.tensor_core = true;
  AttentionCallTraits tc_only;
  tc_only.tensor_core = true;
  const AttentionCallTraits neither;
  using P = AttentionPreference;
  EXPECT_EQ(choose_attention_path(P::automatic, band_and_tc, true), AttentionPath::cudnn);
  EXPECT_EQ(choose_attention_path(P::automatic, band_and_tc, false), AttentionPath::tensor_core);
  EXPECT_EQ(choose_attention_path(P::automatic, tc_only, true), AttentionPath::tensor_core);
  EXPECT_EQ(choose_attention_path(P::automatic, neither, true), AttentionPath::simt);
  // Forcing cuDNN keeps the call on cuDNN even when it is unusable (the router then errs) but
  // leaves calls it cannot express to anvil's kernels.
  EXPECT_EQ(choose_attention_path(P::cudnn, band_and_tc, false), AttentionPath::cudnn);
  EXPECT_EQ(choose_attention_path(P::cudnn, tc_only, true), AttentionPath::tensor_core);
  EXPECT_EQ(choose_attention_path(P::tensor_core, band_and_tc, true), AttentionPath::tensor_core);
  EXPECT_EQ(choose_attention_path(P::tensor_core, neither, true), AttentionPath::simt);
  EXPECT_EQ(choose_attention_path(P::simt, band_and_tc, true), AttentionPath::simt);
  EXPECT_STREQ(attention_path_name(AttentionPath::tensor_core), "tensor-core");
}

// Fake device tensors for the host-side checks: addresses are never dereferenced.
Tensor fake(uintptr_t address, DType dtype, Shape shape) {
  return Tensor(reinterpret_cast<void*>(address), dtype, shape, Device{DeviceType::cuda, 0});
}

struct Call {
  Tensor q, k, v, out;
};

Call call(DType dtype, int64_t D, int64_t Tq = 128, int64_t Tk = 128, uintptr_t base = 1 << 20) {
  return Call{fake(base, dtype, Shape{2, Tq, 8, D}), fake(base + (1 << 24), dtype, Shape{2, Tk, 2, D}),
              fake(base + (2 << 24), dtype, Shape{2, Tk, 2, D}),
              fake(base + (3 << 24), dtype, Shape{2, Tq, 8, D})};
}

AttentionCallTraits traits(const Call& c, const AttentionParams& params) {
  return attention_call_traits(c.q, c.k, c.v, c.out, params);
}

TEST(AttentionRoute, OffersEachCallToWhatCanRunIt) {
  const AttentionParams causal;
  const AttentionCallTraits llama = traits(call(DType::bf16, 128), causal);
  ASSERT_TRUE(llama.cudnn_band.has_value());
  EXPECT_EQ(llama.cudnn_band->right, 0);
  EXPECT_TRUE(llama.tensor_core);
  EXPECT_TRUE(traits(call(DType::bf16, 64), causal).tensor_core);
  // f32 tensors and other head dims stay on the CUDA-core kernels; head dims that are multiples
  // of 8 (96, 40) are cuDNN's too.
  const AttentionCallTraits f32 = traits(call(DType::f32, 128), causal);
  EXPECT_FALSE(f32.tensor_core);
  EXPECT_FALSE(f32.cudnn_band.has_value());
  const AttentionCallTraits d96 = traits(call(DType::bf16, 96), causal);
  EXPECT_FALSE(d96.tensor_core);
  EXPECT_TRUE(d96.cudnn_band.has_value());
  EXPECT_TRUE(traits(call(DType::bf16, 40), causal).cudnn_band.has_value());
  EXPECT_FALSE(traits(call(DType::bf16, 36), causal).cudnn_band.has_value());
  // A tensor off a 16-byte boundary (a view at an odd offset) takes neither fast path.
  const AttentionCallTraits misaligned = traits(call(DType::bf16, 128, 128, 128, (1 << 20) + 8), causal);
  EXPECT_FALSE(misaligned.tensor_core);
  EXPECT_FALSE(misaligned.cudnn_band.has_value());
  // Masks that are not bands go to the tensor-core kernels.
  const Tensor docs = fake(1 << 10, DType::i32, Shape{2, 128});
  AttentionParams documents;
  documents.doc_ids = &docs;
  AttentionParams lines;
  lines.pattern = SparsePattern::lines;
  lines.segment = 64;
  AttentionParams sinks_in_window;
  sinks_in_window.window = 32;
  sinks_in_window.sinks = 4;
  for (const AttentionParams& p : {documents, lines, sinks_in_window}) {
    const AttentionCallTraits t = traits(call(DType::bf16, 128), p);
    EXPECT_FALSE(t.cudnn_band.has_value());
    EXPECT_TRUE(t.tensor_core);
  }
  // A sliding window is a band; with more queries than keys cuDNN refuses its left bound.
  AttentionParams window;
  window.window = 32;
  const AttentionCallTraits swa = traits(call(DType::bf16, 128), window);
  ASSERT_TRUE(swa.cudnn_band.has_value());
  EXPECT_EQ(swa.cudnn_band->left, 32);
  AttentionParams later_queries = window;
  later_queries.q_offset = 64;
  EXPECT_FALSE(traits(call(DType::bf16, 128, 96, 64), later_queries).cudnn_band.has_value());
  // Backward: the gradient tensors count too.
  const Call c = call(DType::bf16, 128);
  const Tensor dq_f32 = fake(5 << 24, DType::f32, c.q.shape);
  EXPECT_FALSE(attention_call_traits(c.q, c.k, c.v, c.out, causal, &c.out, &dq_f32, &c.k, &c.v)
                   .tensor_core);
  EXPECT_TRUE(attention_call_traits(c.q, c.k, c.v, c.out, causal, &c.out, &c.q, &c.k, &c.v)
                  .tensor_core);
}

TEST(AttentionRoute, TensorCoreLaunchersRefuseWhatTheyCannotRun) {
  const Call c = call(DType::f32, 128);
  const Tensor lse = fake(6 << 24, DType::f32, Shape{2, 8, 128});
  EXPECT_THROW(cuda_attention_tc_forward(c.q, c.k, c.v, c.out, lse, AttentionParams{}, nullptr),
               Error);
  EXPECT_EQ(cuda_attention_tc_backward_workspace(c.q), 2u * 8u * 128u * sizeof(float));
}

TEST(CudnnLibrary, LooksInTheDocumentedOrder) {
  const std::vector<std::string> pip = {"/py/nvidia/cudnn/lib"};
  const std::vector<std::string> from_folder =
      cudnn_library_candidates("/opt/cudnn/lib", "/usr/local/cuda/lib64", pip);
  const std::vector<std::string> want = {
      "/opt/cudnn/lib/libcudnn.so.9", "libcudnn.so.9", "/usr/local/cuda/lib64/libcudnn.so.9",
      "/py/nvidia/cudnn/lib/libcudnn.so.9"};
  EXPECT_EQ(from_folder, want);
  EXPECT_EQ(cudnn_library_candidates("/opt/x/libcudnn.so.9.1.0", "", {}).front(),
            "/opt/x/libcudnn.so.9.1.0");
  EXPECT_EQ(cudnn_library_candidates("/opt/cudnn/lib/", "", {}).front(),
            "/opt/cudnn/lib/libcudnn.so.9");
  EXPECT_EQ(cudnn_library_candidates(nullptr, "", {}),
            std::vector<std::string>{"libcudnn.so.9"});
}

TEST(CudnnLibrary, ReportsAMissingFile) {
  const CudnnLibrary missing = load_cudnn_from("/nonexistent/anvil/libcudnn.so.9");
  EXPECT_EQ(missing.handle, nullptr);
  EXPECT_NE(missing.error.find("/nonexistent/anvil/libcudnn.so.9"), std::string::npos)
      << missing.error;
}

TEST(CudnnLibrary, LoadsTheToolkitsCudnn) {
#ifdef ANVIL_TEST_CUDA_LIBRARY_DIR
  const std::string path = std::string(ANVIL_TEST_CUDA_LIBRARY_DIR) + "/libcudnn.so.9";
  const CudnnLibrary library = load_cudnn_from(path);
  if (library.handle == nullptr && library.error.find("no such file") != std::string::npos)
    GTEST_SKIP() << "the CUDA toolkit here has no cuDNN: " << library.error;
  ASSERT_NE(library.handle, nullptr) << library.error;
  EXPECT_GE(library.version, 90000u);
  EXPECT_LT(library.version, 100000u);
#else
  GTEST_SKIP() << "the toolkit's library folder is unknown to this build";
#endif
}

TEST(CudnnAttention, StartsOrSaysWhy) {
  // With a GPU and cuDNN it starts; without either it throws one clear error, never crashes.
  if (!device_unavailable_reason().empty() || load_cudnn_library().handle == nullptr) {
    try {
      CudnnAttention attention;
      FAIL() << "cuDNN attention started without a device or a library";
    } catch (const Error& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("[cuda]"), std::string::npos) << message;
      // With the library loadable (the toolkit's, here) the failure is cuDNN's own answer to
      // having no device: the frontend reached libcudnn through its dynamic-loading handle.
      if (load_cudnn_library().handle != nullptr) {
        EXPECT_NE(message.find("cudnnCreate"), std::string::npos) << message;
      }
      std::printf("[attention] cuDNN attention without a device: %s\n", message.c_str());
    }
    return;
  }
  CudnnAttention attention;
  EXPECT_NE(attention.description().find("cuDNN 9"), std::string::npos) << attention.description();
  std::printf("[attention] %s\n", attention.description().c_str());
}

}  // namespace
}  // namespace anvil::cuda
