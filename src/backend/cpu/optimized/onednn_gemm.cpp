// oneDNN matmul (gemm.h), the GEMM of the AVX-512 kernel table. One primitive per distinct
// (shape, transposes, dtypes, alpha, beta) is created on first use and cached with its memory
// objects, so the steady state creates nothing: a call binds the data pointers and executes.
// The scratchpad is ours (user mode), one buffer sized for the largest cached primitive.
// bf16 operands run on vdpbf16ps where the CPU has AVX512-BF16; a bf16 shape oneDNN has no
// kernel for is remembered as such and widened by Gemm::run. Memory descriptors carry the
// transposes as strides: op(a) = a^T is the (M, K) matrix with strides (1, M); a shared b is a
// (1, K, N) operand that oneDNN broadcasts over the batch. alpha is the output scale and beta a
// sum post-op, so beta == 0 never reads c (NaN in c cannot leak).
#include "backend/cpu/optimized/gemm.h"

#include <cstring>
#include <unordered_map>

#include <fmt/format.h>

#include <oneapi/dnnl/dnnl.hpp>

#include "core/buffer.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

struct GemmKey {
  MatmulShape shape;
  bool operator==(const GemmKey& o) const {
    const MatmulShape &a = shape, &b = o.shape;
    return a.batches == b.batches && a.rank3 == b.rank3 && a.shared_b == b.shared_b &&
           a.M == b.M && a.K == b.K && a.N == b.N && a.transpose_a == b.transpose_a &&
           a.transpose_b == b.transpose_b && a.ab_dtype == b.ab_dtype &&
           a.c_dtype == b.c_dtype && std::memcmp(&a.alpha, &b.alpha, 4) == 0 &&
           std::memcmp(&a.beta, &b.beta, 4) == 0;
  }
};

struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const {
    const MatmulShape& s = k.shape;
    uint64_t h = 1469598103934665603ull;
    auto mix = [&h](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(static_cast<uint64_t>(s.batches));
    mix(static_cast<uint64_t>(s.M));
    mix(static_cast<uint64_t>(s.K));
    mix(static_cast<uint64_t>(s.N));
    uint32_t alpha_bits, beta_bits;
    std::memcpy(&alpha_bits, &s.alpha, 4);
    std::memcpy(&beta_bits, &s.beta, 4);
    mix(alpha_bits);
    mix(beta_bits);
    mix((s.rank3 ? 1u : 0u) | (s.shared_b ? 2u : 0u) | (s.transpose_a ? 4u : 0u) |
        (s.transpose_b ? 8u : 0u) | (static_cast<unsigned>(s.ab_dtype) << 4) |
        (static_cast<unsigned>(s.c_dtype) << 8));
    return static_cast<size_t>(h);
  }
};

struct GemmEntry {
  dnnl::matmul primitive;
  dnnl::memory a, b, c, scratchpad;
  size_t scratchpad_bytes = 0;
  bool usable = true;  // false: oneDNN has no kernel for these bf16 operands on this CPU
};

dnnl::memory::data_type to_dnnl(DType dtype) {
  return dtype == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}

// Returns the descriptor of a (rows, cols) operand, stored transposed when asked, batched as
// (batches, rows, cols) when rank3 (batches == 1 with rank3 means broadcast).
dnnl::memory::desc operand_desc(bool rank3, int64_t batches, int64_t rows, int64_t cols,
                                bool transposed, DType dtype) {
  const int64_t row_stride = transposed ? 1 : cols, col_stride = transposed ? rows : 1;
  if (!rank3) return dnnl::memory::desc({rows, cols}, to_dnnl(dtype), {row_stride, col_stride});
  return dnnl::memory::desc({batches, rows, cols}, to_dnnl(dtype),
                            {rows * cols, row_stride, col_stride});
}

class OneDnnGemm final : public Gemm {
 public:
  OneDnnGemm(const Kernels& kernels, Allocator& scratch) : Gemm(kernels, scratch) {}

  std::string library() const override {
    const dnnl_version_t* v = dnnl_version();
    return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
  }

 protected:
  // f16 takes the widened path: to_dnnl has no f16, and oneDNN's f16 kernels need AVX512-FP16.
  bool native(const MatmulShape& s) override {
    if (s.ab_dtype == DType::f16 || s.c_dtype == DType::f16) return false;
    return entry_for(s).usable;
  }

  void run_native(const MatmulShape& s, const void* a, const void* b, void* c) override {
    GemmEntry& entry = entry_for(s);
    const dnnl_stream_t stream_handle = stream_.get();
    auto bind = [stream_handle](const dnnl::memory& memory, const void* ptr) {
      const dnnl_status_t status =
          dnnl_memory_set_data_handle_v2(memory.get(), const_cast<void*>(ptr), stream_handle);
      ANVIL_CHECK(status == dnnl_success, "[matmul] oneDNN rejected a data pointer (status {})",
                  static_cast<int>(status));
    };
    bind(entry.a, a);
    bind(entry.b, b);
    bind(entry.c, c);
    bind(entry.scratchpad, scratchpad_.data());
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, entry.a.get()},
                                    {DNNL_ARG_WEIGHTS, entry.b.get()},
                                    {DNNL_ARG_DST, entry.c.get()},
                                    {DNNL_ARG_SCRATCHPAD, entry.scratchpad.get()}};
    const dnnl_status_t status =
        dnnl_primitive_execute(entry.primitive.get(), stream_handle, 4, args);
    ANVIL_CHECK(status == dnnl_success, "[matmul] oneDNN matmul failed (status {})",
                static_cast<int>(status));
  }

 private:
  GemmEntry make_entry(const MatmulShape& s) {
    const dnnl::memory::desc a_md =
        operand_desc(s.rank3, s.batches, s.M, s.K, s.transpose_a, s.ab_dtype);
    const dnnl::memory::desc b_md = operand_desc(s.rank3, s.shared_b ? 1 : s.batches, s.K, s.N,
                                                 s.transpose_b, s.ab_dtype);
    const dnnl::memory::desc c_md = operand_desc(s.rank3, s.batches, s.M, s.N, false, s.c_dtype);
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (s.alpha != 1.0f) attr.set_output_scales(0, {s.alpha});
    if (s.beta != 0.0f) {
      dnnl::post_ops post_ops;
      post_ops.append_sum(s.beta);
      attr.set_post_ops(post_ops);
    }
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), attr, engine_);
    GemmEntry entry;
    entry.primitive = dnnl::matmul(pd);
    entry.a = dnnl::memory(a_md, engine_, DNNL_MEMORY_NONE);
    entry.b = dnnl::memory(b_md, engine_, DNNL_MEMORY_NONE);
    entry.c = dnnl::memory(c_md, engine_, DNNL_MEMORY_NONE);
    entry.scratchpad = dnnl::memory(pd.scratchpad_desc(), engine_, DNNL_MEMORY_NONE);
    entry.scratchpad_bytes = pd.scratchpad_desc().get_size();
    return entry;
  }

  GemmEntry& entry_for(const MatmulShape& s) {
    const GemmKey key{s};
    const auto found = cache_.find(key);
    if (found != cache_.end()) return found->second;
    GemmEntry entry;
    try {
      entry = make_entry(s);
    } catch (const dnnl::error& e) {
      ANVIL_CHECK(s.ab_dtype == DType::bf16, "[matmul] oneDNN cannot run an f32 matmul of "
                  "({}, {}) x ({}, {}): {}", s.M, s.K, s.K, s.N, e.what());
      entry.usable = false;
    }
    if (entry.scratchpad_bytes > scratchpad_.bytes()) {
      scratchpad_.reset();
      scratchpad_ = Buffer(scratch_allocator(), entry.scratchpad_bytes, MemoryCategory::workspace);
    }
    return cache_.emplace(key, std::move(entry)).first->second;
  }

  dnnl::engine engine_{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream_{engine_};
  std::unordered_map<GemmKey, GemmEntry, GemmKeyHash> cache_;
  Buffer scratchpad_;
};

}  // namespace

std::unique_ptr<Gemm> make_onednn_gemm(const Kernels& kernels, Allocator& scratch) {
  return std::make_unique<OneDnnGemm>(kernels, scratch);
}

}  // namespace anvil::cpu_opt
