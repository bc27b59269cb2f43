// CudaStream, CudaEvent, PinnedBuffer and PinnedStaging (see cuda_stream.h). Destructors never
// throw: a failure while releasing is ignored (the context may already be torn down at exit).
#include "backend/cuda/cuda_stream.h"

#include <algorithm>
#include <cstring>
#include <memory>

#include "backend/cuda/cuda_check.h"
#include "core/error.h"

namespace anvil::cuda {

CudaStream::CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

CudaEvent::CudaEvent(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

bool CudaEvent::query() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) return false;
  CUDA_CHECK(status);
  return true;
}

std::unique_ptr<CudaBackendEvent> record_timing(cudaStream_t stream, HostWaitCounter on_wait) {
  return std::make_unique<CudaBackendEvent>(stream, std::move(on_wait), true);
}

double elapsed_seconds(const CudaBackendEvent& start, const CudaBackendEvent& end) {
  ANVIL_CHECK(start.timing() && end.timing(),
              "[cuda] elapsed_seconds needs two timing events (record_timing)");
  end.synchronize();
  float milliseconds = 0.0f;
  CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start.get(), end.get()));
  return static_cast<double>(milliseconds) / 1000.0;
}

void stream_wait_event(cudaStream_t stream, const Event& event) {
  if (const auto* cuda_event = dynamic_cast<const CudaBackendEvent*>(&event)) {
    CUDA_CHECK(cudaStreamWaitEvent(stream, cuda_event->get(), 0));
    return;
  }
  event.synchronize();
}

namespace {

// Runs and frees a task queued by CudaCopyStream::enqueue_host.
void CUDART_CB run_host_task(void* task) {
  std::unique_ptr<std::function<void()>> owned(static_cast<std::function<void()>*>(task));
  (*owned)();
}

}  // namespace

void CudaCopyStream::enqueue_host(std::function<void()> task) {
  auto owned = std::make_unique<std::function<void()>>(std::move(task));
  CUDA_CHECK(cudaLaunchHostFunc(stream_.get(), run_host_task, owned.get()));
  owned.release();  // run_host_task frees it
}

std::unique_ptr<Event> CudaCopyStream::record_event() {
  return std::make_unique<CudaBackendEvent>(stream_.get(), on_wait_);
}

void CudaCopyStream::wait_event(const Event& event) { stream_wait_event(stream_.get(), event); }

void CudaCopyStream::copy_to_host(void* dst, const Tensor& src) {
  CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, stream_.get()));
}

void CudaCopyStream::copy_from_host(const Tensor& dst, const void* src) {
  CUDA_CHECK(cudaMemcpyAsync(dst.data, src, dst.nbytes(), cudaMemcpyHostToDevice, stream_.get()));
}

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  CUDA_CHECK(cudaMallocHost(&data_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedStaging::PinnedStaging(size_t chunk_bytes, HostWaitCounter on_wait)
    : chunk_bytes_(chunk_bytes),
      chunks_{PinnedBuffer(chunk_bytes), PinnedBuffer(chunk_bytes)},
      on_wait_(std::move(on_wait)) {}

void PinnedStaging::to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  for (size_t offset = 0, chunk = 0; offset < bytes; offset += chunk_bytes_, ++chunk) {
    const size_t slot = chunk % 2;
    const size_t length = std::min(chunk_bytes_, bytes - offset);
    if (!done_[slot].query()) {  // the slot's previous DMA has not read it yet: wait
      if (on_wait_) on_wait_();
      done_[slot].synchronize();
    }
    std::memcpy(chunks_[slot].data(), in + offset, length);
    CUDA_CHECK(cudaMemcpyAsync(out + offset, chunks_[slot].data(), length,
                               cudaMemcpyHostToDevice, stream));
    done_[slot].record(stream);
  }
}

void PinnedStaging::to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  const size_t chunks = (bytes + chunk_bytes_ - 1) / chunk_bytes_;
  auto issue = [&](size_t chunk) {
    const size_t offset = chunk * chunk_bytes_;
    const size_t length = std::min(chunk_bytes_, bytes - offset);
    CUDA_CHECK(cudaMemcpyAsync(chunks_[chunk % 2].data(), in + offset, length,
                               cudaMemcpyDeviceToHost, stream));
    done_[chunk % 2].record(stream);
  };
  if (chunks > 0) issue(0);
  for (size_t chunk = 0; chunk < chunks; ++chunk) {
    if (chunk + 1 < chunks) issue(chunk + 1);  // overlaps with this chunk's host copy
    done_[chunk % 2].synchronize();
    const size_t offset = chunk * chunk_bytes_;
    std::memcpy(out + offset, chunks_[chunk % 2].data(), std::min(chunk_bytes_, bytes - offset));
  }
}

}  // namespace anvil::cuda
