// CudaBackend construction, memory, transfers, matmul and the registry hooks; the other ops
// are in cuda_backend_ops.cpp. Device memory: cudaMalloc through the caching allocator; an
// out-of-memory cudaMalloc is reported to the allocator as nullptr so it can release its
// cache and retry before throwing.
#include "backend/cuda/cuda_backend.h"

#include <cstring>

#include "backend/cuda/cuda_arrays.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/cuda_device.h"
#include "backend/registry.h"
#include "core/error.h"
#include "core/trace.h"

namespace anvil {
namespace {

// Each pinned staging chunk; two are used in turn.
constexpr size_t kStagingChunkBytes = size_t{8} << 20;
constexpr size_t kReadbackBytes = 64;

}  // namespace

class CudaBackend::DeviceMemory final : public cuda::DeviceMemorySource {
 public:
  void* allocate(size_t bytes) override {
    void* ptr = nullptr;
    const cudaError_t status = cudaMalloc(&ptr, bytes);
    if (status == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the allocator retries after releasing its cache
      return nullptr;
    }
    CUDA_CHECK(status);
    return ptr;
  }
  void release(void* ptr) override { cudaFree(ptr); }
};

CudaBackend::CudaBackend(int device_index) : device_index_(device_index) {
  const std::string unavailable = cuda::device_unavailable_reason();
  ANVIL_CHECK(unavailable.empty(), "[cuda] {}", unavailable);
  CUDA_CHECK(cudaSetDevice(device_index_));
  CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device_index_));
  device_memory_ = std::make_unique<DeviceMemory>();
  allocator_ = std::make_unique<cuda::CachingAllocator>(*device_memory_);
  stream_ = std::make_unique<cuda::CudaStream>();
  staging_ = std::make_unique<cuda::PinnedStaging>(kStagingChunkBytes, host_wait_counter());
  readback_ = std::make_unique<cuda::PinnedBuffer>(kReadbackBytes);
  gemm_ = std::make_unique<cuda::CublasLtGemm>(*this);
  scalars_ = allocate(kReadbackBytes, MemoryCategory::workspace);
  const size_t counter_bytes = cuda::kRmsnormMaxCounters * sizeof(unsigned);
  rmsnorm_counters_ = static_cast<unsigned*>(allocate(counter_bytes, MemoryCategory::workspace));
  CUDA_CHECK(cudaMemsetAsync(rmsnorm_counters_, 0, counter_bytes, stream()));
}

CudaBackend::~CudaBackend() {
  // Pending work may still use cached blocks; the allocator frees every block (scalars_, the
  // RoPE tables, anything a caller leaked) when it is destroyed after the GEMM state.
  if (stream_) cudaStreamSynchronize(stream_->get());
  gemm_.reset();
}

void* CudaBackend::GrowOnlyScratch::reserve(Allocator& allocator, size_t bytes) {
  if (bytes > buffer_.bytes()) {
    buffer_.reset();  // back to the cache first, so the larger block may reuse it
    buffer_ = Buffer(allocator, bytes, MemoryCategory::workspace);
  }
  return buffer_.data();
}

cuda::HostWaitCounter CudaBackend::host_wait_counter() {
  return [this] { count_host_wait(); };
}

void* CudaBackend::do_allocate(size_t bytes) { return allocator_->allocate(bytes); }

void CudaBackend::do_deallocate(void* ptr, size_t) { allocator_->deallocate(ptr); }

void CudaBackend::copy_from_host_kernel(const Tensor& dst, const void* src) {
  TraceSpan span("copy to device", "copy");
  span.arg("bytes", dst.nbytes());
  staging_->to_device(dst.data, src, dst.nbytes(), stream());
}

void CudaBackend::copy_to_host_kernel(void* dst, const Tensor& src) {
  TraceSpan span("copy to host", "copy");
  span.arg("bytes", src.nbytes());
  staging_->to_host(dst, src.data, src.nbytes(), stream());
}

void CudaBackend::copy_kernel(const Tensor& dst, const Tensor& src) {
  if (dst.nbytes() > 0)
    CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, dst.nbytes(), cudaMemcpyDeviceToDevice,
                               stream()));
}

void CudaBackend::fill_zero_kernel(const Tensor& t) {
  CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.nbytes(), stream()));
}

void CudaBackend::synchronize() {
  count_host_wait();
  stream_->synchronize();
}

// A timed cudaEvent read on the trace's clock: the host time at which the device reached the
// window's anchor event plus the device time elapsed since (cuda::elapsed_seconds).
class CudaBackend::TimingEventImpl final : public TimingEvent {
 public:
  TimingEventImpl(std::shared_ptr<const cuda::CudaBackendEvent> anchor, int64_t anchor_ns,
                  std::unique_ptr<cuda::CudaBackendEvent> event)
      : anchor_(std::move(anchor)), anchor_ns_(anchor_ns), event_(std::move(event)) {}
  int64_t device_time_ns() override {
    // Counts a wait only where the device has not got there yet.
    const double seconds = event_->done() ? elapsed_now() : cuda::elapsed_seconds(*anchor_, *event_);
    return anchor_ns_ + static_cast<int64_t>(seconds * 1e9);
  }

 private:
  double elapsed_now() const {
    float ms = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&ms, anchor_->get(), event_->get()));
    return static_cast<double>(ms) / 1000.0;
  }

  std::shared_ptr<const cuda::CudaBackendEvent> anchor_;
  int64_t anchor_ns_;
  std::unique_ptr<cuda::CudaBackendEvent> event_;
};

std::unique_ptr<TimingEvent> CudaBackend::record_timing_event() {
  // One anchor per profile window: elapsed times stay short (cudaEventElapsedTime is a float
  // of milliseconds), and reading the anchor's host time costs one wait per window.
  const uint64_t session = TraceRecorder::instance().session();
  if (!timing_anchor_ || timing_session_ != session) {
    timing_anchor_ = record_timed_event();
    timing_anchor_->synchronize();
    timing_anchor_ns_ = TraceRecorder::now_ns();
    timing_session_ = session;
  }
  return std::make_unique<TimingEventImpl>(timing_anchor_, timing_anchor_ns_,
                                           record_timed_event());
}

std::unique_ptr<Event> CudaBackend::record_event() {
  return std::make_unique<cuda::CudaBackendEvent>(stream(), host_wait_counter());
}

std::unique_ptr<cuda::CudaBackendEvent> CudaBackend::record_timed_event() {
  return cuda::record_timing(stream(), host_wait_counter());
}

void CudaBackend::wait_event(const Event& event) { cuda::stream_wait_event(stream(), event); }

int64_t CudaBackend::free_device_memory() const {
  CUDA_CHECK(cudaSetDevice(device_index_));
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return static_cast<int64_t>(free_bytes + memory_stats().bytes_cached);
}

std::unique_ptr<Stream> CudaBackend::create_stream() {
  CUDA_CHECK(cudaSetDevice(device_index_));
  return std::make_unique<cuda::CudaCopyStream>(host_wait_counter());
}

void CudaBackend::read_back(void* dst, const void* src, size_t bytes) {
  ANVIL_CHECK(bytes <= kReadbackBytes, "[cuda] read_back of {} bytes exceeds {}", bytes,
              kReadbackBytes);
  CUDA_CHECK(cudaMemcpyAsync(readback_->data(), src, bytes, cudaMemcpyDeviceToHost, stream()));
  stream_->synchronize();
  std::memcpy(dst, readback_->data(), bytes);
}

void CudaBackend::matmul_kernel(const Tensor& a, const Tensor& b, const Tensor& c, bool transpose_a,
                                bool transpose_b, float alpha, float beta) {
  const int rank = a.shape.rank();
  const int64_t batches = rank == 3 ? a.shape[0] : 1;
  const int64_t K = transpose_a ? a.shape.back(1) : a.shape.back(0);
  ANVIL_CHECK(batches <= INT32_MAX, "[matmul] {} batches exceed cuBLASLt's limit", batches);
  if (c.numel() == 0) return;
  if (K == 0) {  // empty sum: c = beta * c, and c is not read when beta == 0 (as in BLAS)
    if (beta == 0.0f) return fill_zero(c);
    return scale(c, beta);
  }
  // A shared b under a transposed a cannot fold into rows; one GEMM per batch item avoids
  // relying on cuBLASLt accepting a zero batch stride.
  const bool per_batch = rank == 3 && b.shape.rank() == 2 && transpose_a;
  auto gemm = [&](const Tensor& target) {
    if (!per_batch)
      return gemm_->run(a, b, target, transpose_a, transpose_b, alpha, beta, stream());
    for (int64_t p = 0; p < batches; ++p)
      gemm_->run(a[p], b, target[p], transpose_a, transpose_b, alpha, beta, stream());
  };
  if (a.dtype == DType::f32 && c.dtype == DType::bf16) {
    // cuBLASLt has no f32 x f32 -> bf16 GEMM: accumulate into f32 and round once.
    const size_t bytes = static_cast<size_t>(c.numel()) * sizeof(float);
    const Tensor c32(gemm_staging_.reserve(*this, bytes), DType::f32, c.shape, device());
    if (beta != 0.0f) cast(c, c32);
    gemm(c32);
    cast(c32, c);
    return;
  }
  gemm(c);
}

std::unique_ptr<Backend> make_cuda_backend() { return std::make_unique<CudaBackend>(0); }

std::string describe_cuda_backend() {
  const std::string built = "cuda: built for " + cuda::built_architectures();
  const std::string unavailable = cuda::device_unavailable_reason();
  if (!unavailable.empty()) return built + ", " + unavailable;
  int count = 0, runtime = 0;
  cudaDeviceProp props{};
  if (cudaGetDeviceCount(&count) != cudaSuccess ||
      cudaGetDeviceProperties(&props, 0) != cudaSuccess ||
      cudaRuntimeGetVersion(&runtime) != cudaSuccess) {
    cudaGetLastError();
    return built + ", device present but its properties could not be read";
  }
  return fmt::format("{}, device 0 of {}: {} (sm_{}{}, {:.1f} GiB, {} SMs), CUDA runtime {}.{}, "
                     "cuBLASLt {}",
                     built, count, props.name, props.major, props.minor,
                     static_cast<double>(props.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0),
                     props.multiProcessorCount, runtime / 1000, (runtime % 1000) / 10,
                     cublasLtGetVersion());
}

void register_cuda_backend(BackendRegistry& registry) {
  registry.add({"cuda", describe_cuda_backend, make_cuda_backend, true,
                [](const Backend& backend) {
                  return static_cast<const CudaBackend&>(backend).free_device_memory();
                }});
}

}  // namespace anvil
