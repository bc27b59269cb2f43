// FlagEvent and WorkerStream (see worker_stream.h).
#include "backend/worker_stream.h"

#include <cstring>

namespace anvil {

std::unique_ptr<FlagEvent> FlagEvent::completed() {
  auto event = std::make_unique<FlagEvent>();
  event->completer()();
  return event;
}

bool FlagEvent::done() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->done;
}

void FlagEvent::synchronize() const {
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->ready.wait(lock, [this] { return state_->done; });
}

std::function<void()> FlagEvent::completer() const {
  return [state = state_] {
    {
      std::lock_guard<std::mutex> lock(state->mutex);
      state->done = true;
    }
    state->ready.notify_all();
  };
}

WorkerStream::WorkerStream(const Backend& backend)
    : backend_(backend), worker_([this] { work(); }) {}

WorkerStream::~WorkerStream() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    idle_.wait(lock, [this] { return queue_.empty() && !running_; });
    stopping_ = true;
  }
  work_ready_.notify_all();
  worker_.join();
}

void WorkerStream::enqueue_host(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(task));
  }
  work_ready_.notify_one();
}

std::unique_ptr<Event> WorkerStream::record_event() {
  auto event = std::make_unique<FlagEvent>();
  enqueue_host(event->completer());
  return event;
}

void WorkerStream::wait_event(const Event& event) {
  // The caller may destroy the event once this returns: the task waits on a copy sharing its
  // state.
  if (event.done()) return;
  auto* flag = dynamic_cast<const FlagEvent*>(&event);
  if (flag != nullptr) {
    enqueue_host([copy = *flag] { copy.synchronize(); });
    return;
  }
  event.synchronize();  // an event of another kind: wait here, before queueing more
}

// Device memory is reached through the backend's host view (the kernel view on sim), which is
// resolved now: the task itself must not throw.
void WorkerStream::copy_to_host(void* dst, const Tensor& src) {
  const Tensor view = backend_.host_view(src);
  enqueue_host([dst, view] { std::memcpy(dst, view.data, view.nbytes()); });
}

void WorkerStream::copy_from_host(const Tensor& dst, const void* src) {
  const Tensor view = backend_.host_view(dst);
  enqueue_host([view, src] { std::memcpy(view.data, src, view.nbytes()); });
}

void WorkerStream::synchronize() {
  std::unique_lock<std::mutex> lock(mutex_);
  idle_.wait(lock, [this] { return queue_.empty() && !running_; });
}

void WorkerStream::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_ready_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
    if (queue_.empty()) return;
    std::function<void()> task = std::move(queue_.front());
    queue_.pop_front();
    running_ = true;
    lock.unlock();
    task();
    lock.lock();
    running_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
}

}  // namespace anvil
