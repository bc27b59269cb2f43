// SimStream (see sim_stream.h).
#include "backend/sim/sim_stream.h"

#include <omp.h>

namespace anvil::sim {

SimStream::SimStream() : worker_([this] { work(); }) {}

SimStream::~SimStream() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

void SimStream::enqueue(std::function<void()> task, bool control) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(Task{std::move(task), omp_get_max_threads(), control});
  }
  work_ready_.notify_one();
}

void SimStream::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && running_ == 0; });
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
}

size_t SimStream::pending() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queue_.size() + running_;
}

void SimStream::work() {
  int threads = omp_get_max_threads();
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping with nothing left
    Task task = std::move(queue_.front());
    queue_.pop_front();
    const bool skip = error_ != nullptr && !task.control;  // a failed stream runs nothing until wait() reports it
    ++running_;
    lock.unlock();
    if (!skip) {
      if (task.threads != threads) omp_set_num_threads(threads = task.threads);
      try {
        task.run();
      } catch (...) {
        lock.lock();
        error_ = std::current_exception();
        lock.unlock();
      }
    }
    lock.lock();
    --running_;
    if (queue_.empty() && running_ == 0) idle_.notify_all();
  }
}

}  // namespace anvil::sim
