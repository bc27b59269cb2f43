// Host-thread building blocks of Backend streams and events (backend.h): an event that a task
// of a stream completes, and a Stream running its tasks on a worker thread of its own. The
// default Backend::create_stream returns a WorkerStream; the simulated device uses one as its
// communication stream, beside the SimStream its ops run on.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include "backend/backend.h"

namespace anvil {

// An event completed by whoever calls complete() (a task queued where the event stands).
class FlagEvent final : public Event {
 public:
  // Returns an event that has already completed.
  static std::unique_ptr<FlagEvent> completed();
  FlagEvent() : state_(std::make_shared<State>()) {}
  bool done() const override;
  void synchronize() const override;
  // Returns the function that completes the event (it may outlive the event).
  std::function<void()> completer() const;

 private:
  struct State {
    mutable std::mutex mutex;
    mutable std::condition_variable ready;
    bool done = false;
  };
  std::shared_ptr<State> state_;
};

class WorkerStream final : public Stream {
 public:
  // `backend` (which must outlive the stream) resolves device addresses for copies.
  explicit WorkerStream(const Backend& backend);
  // Runs every queued task, then joins the worker.
  ~WorkerStream() override;
  WorkerStream(const WorkerStream&) = delete;
  WorkerStream& operator=(const WorkerStream&) = delete;

  void enqueue_host(std::function<void()> task) override;
  std::unique_ptr<Event> record_event() override;
  void wait_event(const Event& event) override;
  void copy_to_host(void* dst, const Tensor& src) override;
  void copy_from_host(const Tensor& dst, const void* src) override;
  void synchronize() override;

 private:
  void work();

  const Backend& backend_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable idle_;
  std::deque<std::function<void()>> queue_;
  bool running_ = false;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace anvil
