// CudaStream, CudaEvent, PinnedBuffer and PinnedStaging (see cuda_stream.h). Destructors never
// throw: a failure while releasing is ignored (the context may already be torn down at exit).
#include "backend/cuda/cuda_stream.h"

#include <algorithm>
#include <cstring>

#include "backend/cuda/cuda_check.h"

namespace anvil::cuda {

CudaStream::CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }

CudaStream::~CudaStream() {
  if (stream_) cudaStreamDestroy(stream_);
}

void CudaStream::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

CudaEvent::CudaEvent() { CUDA_CHECK(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming)); }

CudaEvent::~CudaEvent() {
  if (event_) cudaEventDestroy(event_);
}

void CudaEvent::record(cudaStream_t stream) { CUDA_CHECK(cudaEventRecord(event_, stream)); }

void CudaEvent::synchronize() const { CUDA_CHECK(cudaEventSynchronize(event_)); }

PinnedBuffer::PinnedBuffer(size_t bytes) : bytes_(bytes) {
  CUDA_CHECK(cudaMallocHost(&data_, bytes));
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

PinnedStaging::PinnedStaging(size_t chunk_bytes)
    : chunk_bytes_(chunk_bytes),
      chunks_{PinnedBuffer(chunk_bytes), PinnedBuffer(chunk_bytes)} {}

void PinnedStaging::to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream) {
  auto* out = static_cast<char*>(dst);
  const auto* in = static_cast<const char*>(src);
  for (size_t offset = 0, chunk = 0; offset < bytes; offset += chunk_bytes_, ++chunk) {
    const size_t slot = chunk % 2;
    const size_t length = std::min(chunk_bytes_, bytes - offset);
    done_[slot].synchronize();  // the slot's previous DMA has read it
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
