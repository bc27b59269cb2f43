// Device spans (device_trace.h): pending (name, begin, end) events in recording order, turned
// into trace events once the device has reached them.
#include "backend/device_trace.h"

#include <mutex>
#include <vector>

#include "core/trace.h"

namespace anvil {
namespace {

struct PendingSpan {
  uint64_t session = 0;
  std::string name;
  std::unique_ptr<TimingEvent> begin;
  std::unique_ptr<TimingEvent> end;
};

std::mutex& pending_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<PendingSpan>& pending_spans() {
  static std::vector<PendingSpan> spans;
  return spans;
}

}  // namespace

DeviceSpan::DeviceSpan(Backend& backend, std::string name)
    : backend_(&backend), session_(TraceRecorder::instance().session()) {
  // A host backend's ops finish before they return: its host spans are its device time.
  if (backend.device().is_cpu()) session_ = 0;
  if (session_ == 0) return;
  name_ = std::move(name);
  begin_ = backend.record_timing_event();
}

void DeviceSpan::end() {
  if (session_ == 0) return;
  PendingSpan span{session_, std::move(name_), std::move(begin_),
                   backend_->record_timing_event()};
  session_ = 0;
  std::lock_guard<std::mutex> lock(pending_mutex());
  pending_spans().push_back(std::move(span));
}

int flush_device_spans() {
  std::vector<PendingSpan> spans;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    spans.swap(pending_spans());
  }
  TraceRecorder& recorder = TraceRecorder::instance();
  for (PendingSpan& span : spans) {
    TraceEvent event;
    event.name = std::move(span.name);
    event.category = kTraceDevice;
    event.begin_ns = span.begin->device_time_ns();
    event.duration_ns = span.end->device_time_ns() - event.begin_ns;
    event.thread = 0;
    event.track = "device";
    recorder.add(span.session, std::move(event));
  }
  return static_cast<int>(spans.size());
}

}  // namespace anvil
