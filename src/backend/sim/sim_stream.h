// The simulated device's stream: one worker thread running queued tasks in FIFO order, so
// every op returns before its work is done, as on an accelerator. A task that throws stops the
// stream (later tasks are dropped, like a sticky device error) and wait() rethrows it at the
// next synchronisation point. Tasks run with the OpenMP thread count of the thread that queued
// them, so results equal the CPU backend's under the same --threads.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

namespace anvil::sim {

class SimStream {
 public:
  SimStream();
  // Drains the queue (dropping a pending error) and joins the worker.
  ~SimStream();
  SimStream(const SimStream&) = delete;
  SimStream& operator=(const SimStream&) = delete;

  // Queues a task behind every task queued so far. A control task (an event's completion or
  // wait) runs even after a failure, so other streams waiting on this one never hang.
  void enqueue(std::function<void()> task, bool control = false);
  // Blocks until every queued task has run; rethrows the first failure since the last wait.
  void wait();
  // Returns the number of tasks queued or running (for tests; racy by nature).
  size_t pending() const;

 private:
  struct Task {
    std::function<void()> run;
    int threads;
    bool control;
  };
  void work();

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<Task> queue_;
  size_t running_ = 0;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread worker_;
};

}  // namespace anvil::sim
