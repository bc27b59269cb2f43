// Device time in the profile window (`--profile.steps`): a DeviceSpan brackets work queued on a
// backend's compute stream with two timing events, so the trace shows when the device ran it,
// not when the host queued it (on an asynchronous device the host runs ahead, and host clocks
// would charge the time to whichever span happens to wait). Spans are kept pending until
// flush_device_spans() reads their events (it blocks until the device has reached them: call
// it at the end of a profiled step, never inside one) and adds them to the window's trace as
// category "device" on the track "device". Outside a window a DeviceSpan costs one atomic load;
// on a host backend (cpu) it records nothing, since there the host spans are the device time.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"

namespace anvil {

// Category of the device spans in the trace (summed per name into the run's summary).
inline constexpr const char* kTraceDevice = "device";
// Category of a host span in which the host waits for the device (a step's readback).
inline constexpr const char* kTraceHostWait = "host_wait";

class DeviceSpan {
 public:
  // Starts a span named `name` at this point of `backend`'s compute stream when a profile
  // window is open and the backend is a device (nothing otherwise).
  DeviceSpan(Backend& backend, std::string name);
  ~DeviceSpan() { end(); }
  DeviceSpan(const DeviceSpan&) = delete;
  DeviceSpan& operator=(const DeviceSpan&) = delete;
  // Ends the span at this point of the stream; later calls do nothing.
  void end();

 private:
  Backend* backend_;
  uint64_t session_ = 0;
  std::string name_;
  std::unique_ptr<TimingEvent> begin_;
};

// Adds every pending device span to the trace (blocking until the device has reached their
// events) and returns how many it added.
int flush_device_spans();

}  // namespace anvil
