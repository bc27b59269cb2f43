// HostAdamW: host buffers on a CPU backend instance, and a worker thread that steps the
// submitted groups in order.
#include "optim/host_adamw.h"

#include <omp.h>

#include <utility>

#include "core/error.h"

namespace anvil {

HostAdamW::HostAdamW(const std::vector<HostGroupSpec>& groups, AdamWHyperParams hyper)
    : backend_(make_backend("cpu")) {
  std::vector<OptimizerGroup> optimizer_groups;
  for (const HostGroupSpec& spec : groups) {
    ANVIL_CHECK(spec.numel > 0, "[offload] a host optimizer group must not be empty");
    const size_t bytes = static_cast<size_t>(spec.numel) * sizeof(float);
    masters_.emplace_back(*backend_, bytes, MemoryCategory::trainable_weights);
    gradients_.emplace_back(*backend_, bytes, MemoryCategory::gradients);
    const Tensor master = masters_.back().as(DType::f32, Shape{spec.numel});
    const Tensor gradient = gradients_.back().as(DType::f32, Shape{spec.numel});
    backend_->fill_zero(master);
    backend_->fill_zero(gradient);
    OptimizerGroup group;
    group.params = master;
    group.grads = gradient;
    group.spans = spec.spans;
    optimizer_groups.push_back(std::move(group));
  }
  adamw_ = std::make_unique<AdamW>(*backend_, std::move(optimizer_groups), hyper);
  done_.assign(groups.size(), true);
  worker_ = std::thread([this] { run_worker(); });
}

HostAdamW::~HostAdamW() {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return queue_.empty(); });
    stopping_ = true;
  }
  changed_.notify_all();
  worker_.join();
}

Tensor HostAdamW::master(int group) const {
  const Buffer& buffer = masters_.at(static_cast<size_t>(group));
  return buffer.as(DType::f32, Shape{static_cast<int64_t>(buffer.bytes() / sizeof(float))});
}

Tensor HostAdamW::gradient(int group) const {
  const Buffer& buffer = gradients_.at(static_cast<size_t>(group));
  return buffer.as(DType::f32, Shape{static_cast<int64_t>(buffer.bytes() / sizeof(float))});
}

void HostAdamW::begin_step(double lr, double grad_scale) {
  wait_all();
  std::lock_guard lock(mutex_);
  lr_ = lr;
  grad_scale_ = grad_scale;
  adamw_->begin_step();
  done_.assign(done_.size(), false);
}

void HostAdamW::submit(int group) {
  ANVIL_CHECK(group >= 0 && group < group_count(), "[offload] group {} of {}", group,
              group_count());
  {
    std::lock_guard lock(mutex_);
    queue_.push_back(Task{group, omp_get_max_threads()});
  }
  changed_.notify_all();
}

void HostAdamW::wait(int group) {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [&] { return error_ || done_.at(static_cast<size_t>(group)); });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostAdamW::wait_all() {
  std::unique_lock lock(mutex_);
  changed_.wait(lock, [this] { return error_ || queue_.empty(); });
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void HostAdamW::run_worker() {
  int threads = omp_get_max_threads();
  std::unique_lock lock(mutex_);
  while (true) {
    changed_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    const Task task = queue_.front();
    lock.unlock();
    std::exception_ptr error;
    try {
      if (task.threads != threads) omp_set_num_threads(threads = task.threads);
      adamw_->step_group(static_cast<size_t>(task.group), lr_, grad_scale_);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    queue_.pop_front();  // only now: wait_all sees an empty queue once the update has run
    done_[static_cast<size_t>(task.group)] = true;
    if (error && !error_) error_ = error;
    changed_.notify_all();
  }
}

}  // namespace anvil
