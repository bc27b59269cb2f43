// RAII wrappers for the CUDA objects the backend owns (stream, event, pinned host buffer), the
// Backend Event and Stream over them (real cudaEvents; a second stream for copies and host
// tasks beside the compute stream), and the pinned staging that copy_from_host/copy_to_host go through: user memory is pageable, so
// it is copied through two pinned chunks in turn, overlapping the host memcpy of one chunk with
// the DMA of the other. Uploads return once the source has been staged (the DMA is ordered on
// the stream); downloads return when the data is in the destination.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <functional>

#include "backend/backend.h"

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
  // Returns whether the recorded work is done; never blocks.
  bool query() const;
  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// A Backend Event: a cudaEvent recorded on one stream of the backend.
class CudaBackendEvent final : public Event {
 public:
  explicit CudaBackendEvent(cudaStream_t stream) { event_.record(stream); }
  bool done() const override { return event_.query(); }
  void synchronize() const override { event_.synchronize(); }
  cudaEvent_t get() const { return event_.get(); }

 private:
  CudaEvent event_;
};

// Makes `stream` wait on the device for `event` when it is a CudaBackendEvent (the stream
// keeps the wait even if the event is destroyed next); any other event is waited on the host.
void stream_wait_event(cudaStream_t stream, const Event& event);

// A Backend Stream on a CUDA stream of its own: copies between device and host memory
// (asynchronous from page-locked host memory) and host tasks (cudaLaunchHostFunc: they run in
// order with the copies and must not call CUDA) overlap the compute stream's kernels.
class CudaCopyStream final : public Stream {
 public:
  CudaCopyStream() = default;
  void enqueue_host(std::function<void()> task) override;
  std::unique_ptr<Event> record_event() override;
  void wait_event(const Event& event) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void synchronize() override { stream_.synchronize(); }

 private:
  CudaStream stream_;
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
