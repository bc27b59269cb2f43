// HostAdamW: the optimizer half of ZeRO-Offload. The f32 master parameters, the gradients
// they are stepped with and AdamW's moments live in host memory, allocated on a host CPU
// backend of their own (so the device's memory counters no longer hold them), and the
// optimized CPU AdamW kernel updates them on a worker thread while the caller goes on: the
// caller hands over group after group (submit) and collects each result when it needs it
// (wait). The worker runs groups in submission order, one at a time, and the result is the
// same bits as AdamW::step on the host backend (the kernel is elementwise).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "optim/adamw.h"

namespace anvil {

// One group: its element count and weight-decay spans (tiling [0, numel)).
struct HostGroupSpec {
  int64_t numel = 0;
  std::vector<ParamSpan> spans;
};

class HostAdamW {
 public:
  // Allocates zeroed masters, gradients and moments for `groups` on a new host CPU backend.
  HostAdamW(const std::vector<HostGroupSpec>& groups, AdamWHyperParams hyper);
  // Waits for the worker to finish what was submitted.
  ~HostAdamW();
  HostAdamW(const HostAdamW&) = delete;
  HostAdamW& operator=(const HostAdamW&) = delete;

  // The host backend every tensor below lives on.
  Backend& backend() const { return *backend_; }
  int group_count() const { return static_cast<int>(masters_.size()); }
  // Group g's f32 master parameters and the gradient its next update reads (host memory,
  // written by the caller only while no update of g is in flight).
  Tensor master(int group) const;
  Tensor gradient(int group) const;

  // Starts an optimizer step at learning rate `lr`, every gradient multiplied by
  // `grad_scale`: advances the step counter. Every group is then submitted exactly once.
  void begin_step(double lr, double grad_scale);
  // Queues group g's update behind those submitted before it.
  void submit(int group);
  // Blocks until group g's update of this step has run; rethrows an error of the worker.
  void wait(int group);
  // Blocks until every submitted update has run.
  void wait_all();

  int64_t step_count() const { return adamw_->step_count(); }
  void set_step_count(int64_t steps) { adamw_->set_step_count(steps); }
  // Returns the moments, named as AdamW::state_tensors (m then v per group).
  std::vector<NamedTensor> state_tensors() const { return adamw_->state_tensors(); }

 private:
  void run_worker();

  std::unique_ptr<Backend> backend_;
  std::vector<Buffer> masters_;
  std::vector<Buffer> gradients_;
  std::unique_ptr<AdamW> adamw_;
  double lr_ = 0.0;
  double grad_scale_ = 1.0;
  std::mutex mutex_;
  std::condition_variable changed_;
  struct Task {
    int group = -1;
    int threads = 1;  // the submitter's OpenMP thread count, used by the kernel
  };
  std::deque<Task> queue_;
  std::vector<bool> done_;  // per group: this step's update has run
  std::exception_ptr error_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace anvil
