// OpenBLAS sgemm (gemm.h), the GEMM of the AVX2 and generic kernel tables. We thread it
// ourselves: OpenBLAS is held at one thread and each OpenMP thread of ours multiplies one
// slice (a batch, or a contiguous block of rows or columns of c), so one thread pool serves
// every op and the pthread OpenBLAS never spins next to OpenMP. A slice never splits K, so
// each element of c is one sum in OpenBLAS's order whatever the thread count. OpenBLAS keeps
// its packing buffers in a pool, mapped when the backend is made: the steady state allocates
// nothing.
// bf16 and f16 operands take the widened path (Debian's OpenBLAS exports neither GEMM).
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <mutex>
#include <vector>

#include "backend/cpu/optimized/gemm.h"
#include "backend/cpu/optimized/parallel.h"
#include "core/error.h"

namespace anvil::cpu_opt {
namespace {

// Below these a slice costs more in waking a thread than it saves (a token's decode step is
// M = 1; the thread hand-off is microseconds, and a whole scheduler slice when the machine
// is oversubscribed): no slice narrower than kMinSliceExtent rows or columns, and no thread
// woken for fewer than kMinSliceWork multiply-adds (~5 us at this backend's GEMM rate).
constexpr int64_t kMinSliceExtent = 32;
constexpr int64_t kMinSliceWork = int64_t{1} << 18;

// Multiplies two side x side matrices at `abc` into the third after them (OpenBLAS's warm-up
// calls: the values do not matter, the buffers OpenBLAS maps for them do).
void multiply_squares(int side, float* abc) {
  const int64_t n = int64_t{side} * side;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, side, side, side, 1.0f, abc, side,
              abc + n, side, 0.0f, abc + 2 * n, side);
}

class OpenBlasGemm final : public Gemm {
 public:
  // make_gemm has settled OpenBLAS's pool and held it at one thread first.
  OpenBlasGemm(const Kernels& kernels, Allocator& scratch) : Gemm(kernels, scratch) {
    map_packing_buffers();
  }

  // OpenBLAS maps a packing buffer for each call running at once on first use (its
  // BUFFER_SIZE: 128 MiB of address space in Debian's build) and, when the mapping fails,
  // retries forever: under an address-space limit (`ulimit -v`) the first step's GEMMs would
  // hang once the run's own buffers took the room. Every thread of ours calls it here, the
  // calls lined up by a barrier, so the buffers exist once the backend does: the pre-flight
  // check counts them as mapped and plans the run in what is left. (A barrier makes the calls
  // overlap in practice, not by contract; a buffer a thread maps later is unplanned.)
  static void map_packing_buffers() {
    // Past OpenBLAS's small-matrix path (M x N x K <= 100^3), which needs no buffer.
    constexpr int kSide = 128;
#pragma omp parallel
    {
      std::vector<float> zeros(3 * kSide * kSide);
#pragma omp barrier
      multiply_squares(kSide, zeros.data());
    }
  }

  std::string library() const override {
    // openblas_get_config() reads "OpenBLAS 0.3.21 DYNAMIC_ARCH ... Zen MAX_THREADS=64".
    const std::string config = openblas_get_config();
    const size_t end = config.find(' ', config.find(' ') + 1);
    return config.substr(0, end) + " (" + openblas_get_corename() + " kernels)";
  }

 protected:
  bool native(const MatmulShape& s) override {
    return s.ab_dtype == DType::f32 && s.c_dtype == DType::f32;
  }

  void run_native(const MatmulShape& s, const void* a_ptr, const void* b_ptr,
                  void* c_ptr) override {
    ANVIL_CHECK(s.M <= INT_MAX && s.N <= INT_MAX && s.K <= INT_MAX,
                "[matmul] ({}, {}) x ({}, {}) exceeds OpenBLAS's 32-bit dimensions", s.M, s.K,
                s.K, s.N);
    const float* a = static_cast<const float*>(a_ptr);
    const float* b = static_cast<const float*>(b_ptr);
    float* c = static_cast<float*>(c_ptr);
    // Row-major operands as stored: a is (M, K), or (K, M) when transposed; b likewise.
    const int64_t lda = s.transpose_a ? s.M : s.K, ldb = s.transpose_b ? s.K : s.N;
    const int64_t a_batch = s.M * s.K, b_batch = s.shared_b ? 0 : s.K * s.N, c_batch = s.M * s.N;
    // Threads worth waking: one per kMinSliceWork multiply-adds at most. Slices: whole batches
    // when there are enough of them, else blocks of the longer side.
    const int64_t parts = std::clamp<int64_t>(s.batches * s.M * s.N * s.K / kMinSliceWork, 1,
                                              omp_get_max_threads());
    const int64_t per_batch =
        s.batches >= parts
            ? 1
            : std::max<int64_t>(1, std::min(parts / s.batches,
                                            std::max(s.M, s.N) / kMinSliceExtent));
    const bool split_rows = s.M >= s.N;
    const int64_t extent = split_rows ? s.M : s.N;
    const auto slice = [&](int64_t item) {
      const int64_t batch = item / per_batch, part = item % per_batch;
      const int64_t begin = extent * part / per_batch, end = extent * (part + 1) / per_batch;
      const float* a_slice = a + batch * a_batch;
      const float* b_slice = b + batch * b_batch;
      float* c_slice = c + batch * c_batch;
      int64_t rows = s.M, cols = s.N;
      if (split_rows) {
        a_slice += s.transpose_a ? begin : begin * lda;
        c_slice += begin * s.N;
        rows = end - begin;
      } else {
        b_slice += s.transpose_b ? begin * ldb : begin;
        c_slice += begin;
        cols = end - begin;
      }
      cblas_sgemm(CblasRowMajor, s.transpose_a ? CblasTrans : CblasNoTrans,
                  s.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(rows),
                  static_cast<int>(cols), static_cast<int>(s.K), s.alpha, a_slice,
                  static_cast<int>(lda), b_slice, static_cast<int>(ldb), s.beta, c_slice,
                  static_cast<int>(s.N));
    };
    const int64_t items = s.batches * per_batch;
    if (parts == 1) {
      for (int64_t item = 0; item < items; ++item) slice(item);
      return;
    }
#pragma omp parallel for schedule(static)
    for (int64_t item = 0; item < items; ++item) slice(item);
  }
};

}  // namespace

void settle_openblas_threads() {
  static std::once_flag settled;
  std::call_once(settled, [] {
    // A GEMM split over every pool thread returns only after each has run its share, so each
    // has started, and mapped its buffer, by then. 512^3 is past the size OpenBLAS splits.
    const int pool = openblas_get_num_threads();
    if (pool > 1) {
      constexpr int kSide = 512;
      std::vector<float> zeros(3 * kSide * kSide);
      multiply_squares(kSide, zeros.data());
    }
    openblas_set_num_threads(1);
  });
}

std::unique_ptr<Gemm> make_openblas_gemm(const Kernels& kernels, Allocator& scratch) {
  return std::make_unique<OpenBlasGemm>(kernels, scratch);
}

}  // namespace anvil::cpu_opt
