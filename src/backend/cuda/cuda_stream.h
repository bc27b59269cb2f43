// RAII wrappers for the CUDA objects the backend owns (stream, event, pinned host buffer) and
// the pinned staging that copy_from_host/copy_to_host go through: user memory is pageable, so
// it is copied through two pinned chunks in turn, overlapping the host memcpy of one chunk with
// the DMA of the other. Uploads return once the source has been staged (the DMA is ordered on
// the stream); downloads return when the data is in the destination.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>

namespace anvil::cuda {

class CudaStream {
 public:
  // Creates a non-blocking stream (no implicit sync with the legacy default stream).
  CudaStream();
  ~CudaStream();
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }
  // Blocks until all work queued on the stream is done; throws on an asynchronous error.
  void synchronize() const;

 private:
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  CudaEvent();
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  // Marks the current end of `stream`'s queue.
  void record(cudaStream_t stream);
  // Blocks until the recorded work is done (returns at once if never recorded).
  void synchronize() const;

 private:
  cudaEvent_t event_ = nullptr;
};

// Page-locked host memory (cudaMallocHost), the only memory DMA copies run asynchronously from.
class PinnedBuffer {
 public:
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

class PinnedStaging {
 public:
  explicit PinnedStaging(size_t chunk_bytes);
  // Copies host `src` to device `dst` through the pinned chunks, queued on `stream`.
  void to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  // Copies device `src` to host `dst` after the work queued on `stream`; returns when done.
  void to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  size_t chunk_bytes_;
  std::array<PinnedBuffer, 2> chunks_;
  std::array<CudaEvent, 2> done_;
};

}  // namespace anvil::cuda
