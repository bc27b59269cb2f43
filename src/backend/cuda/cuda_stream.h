// RAII wrappers for the CUDA objects the backend owns (stream, event, pinned host buffer), the
// Backend Event and Stream over them (real cudaEvents; a second stream for copies and host
// tasks beside the compute stream), and the pinned staging that copy_from_host/copy_to_host
// go through: user memory is pageable, so it is copied through two pinned chunks in turn,
// overlapping the host memcpy of one chunk with the DMA of the other. Uploads return once the
// source has been staged (the DMA is ordered on the stream); downloads return when the data
// is in the destination.
// Host waits: every call that blocks the host until device work completes reports itself to
// the backend's counter (Backend::host_waits): CudaBackendEvent::synchronize and
// CudaCopyStream::synchronize on every call, an upload only when a staging chunk is still in
// flight (the host really waits). Timing events (record_timing) carry device timestamps, and
// elapsed_seconds() gives the device time between two of them (the trace's device spans).
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstddef>
#include <functional>
#include <memory>

#include "backend/backend.h"

namespace anvil::cuda {

// Called once for each blocking wait of the host (Backend::count_host_wait); may be empty.
using HostWaitCounter = std::function<void()>;

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
  // A timing event records a device timestamp (cudaEventElapsedTime); others do not, which
  // makes recording and waiting cheaper.
  explicit CudaEvent(bool timing = false);
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

// A Backend Event: a cudaEvent recorded on one stream of the backend. synchronize() counts
// one host wait through the backend's counter, so an event must not outlive its backend.
class CudaBackendEvent final : public Event {
 public:
  CudaBackendEvent(cudaStream_t stream, HostWaitCounter on_wait = {}, bool timing = false)
      : event_(timing), on_wait_(std::move(on_wait)), timing_(timing) {
    event_.record(stream);
  }
  bool done() const override { return event_.query(); }
  void synchronize() const override {
    if (on_wait_) on_wait_();
    event_.synchronize();
  }
  cudaEvent_t get() const { return event_.get(); }
  // Returns whether the event records a device timestamp.
  bool timing() const { return timing_; }

 private:
  CudaEvent event_;
  HostWaitCounter on_wait_;
  bool timing_ = false;
};

// Returns a timing event recorded now on `stream` (for device-time spans in the trace).
std::unique_ptr<CudaBackendEvent> record_timing(cudaStream_t stream,
                                                HostWaitCounter on_wait = {});
// Returns the device time in seconds from `start` to `end`, both timing events recorded on
// the same device; waits for `end` first (one counted host wait). Throws naming the problem
// for a non-timing event.
double elapsed_seconds(const CudaBackendEvent& start, const CudaBackendEvent& end);

// Makes `stream` wait on the device for `event` when it is a CudaBackendEvent (the stream
// keeps the wait even if the event is destroyed next); any other event is waited on the host.
void stream_wait_event(cudaStream_t stream, const Event& event);

// A Backend Stream on a CUDA stream of its own: copies between device and host memory
// (asynchronous from page-locked host memory) and host tasks (cudaLaunchHostFunc: they run in
// order with the copies and must not call CUDA) overlap the compute stream's kernels.
class CudaCopyStream final : public Stream {
 public:
  explicit CudaCopyStream(HostWaitCounter on_wait = {}) : on_wait_(std::move(on_wait)) {}
  void enqueue_host(std::function<void()> task) override;
  std::unique_ptr<Event> record_event() override;
  void wait_event(const Event& event) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  // Blocks until the stream's work is done: one counted host wait.
  void synchronize() override {
    if (on_wait_) on_wait_();
    stream_.synchronize();
  }

 private:
  CudaStream stream_;
  HostWaitCounter on_wait_;
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
  // `on_wait` counts an upload that blocks on a chunk still in flight.
  explicit PinnedStaging(size_t chunk_bytes, HostWaitCounter on_wait = {});
  // Copies host `src` to device `dst` through the pinned chunks, queued on `stream`.
  void to_device(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  // Copies device `src` to host `dst` after the work queued on `stream`; returns when done
  // (the caller counts that wait: it is copy_to_host's).
  void to_host(void* dst, const void* src, size_t bytes, cudaStream_t stream);
  size_t chunk_bytes() const { return chunk_bytes_; }

 private:
  size_t chunk_bytes_;
  std::array<PinnedBuffer, 2> chunks_;
  std::array<CudaEvent, 2> done_;
  HostWaitCounter on_wait_;
};

}  // namespace anvil::cuda
