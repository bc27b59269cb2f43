// DataParallelEngine's group hooks: stage-3 weight gathers with one-group-ahead prefetch, and
// the per-micro-step gradient reductions of every stage. Every rank makes the same calls in
// the same order (the model's hook sequence is fixed), so collectives match across ranks;
// chained steps of a reduction start in FIFO order for the same reason.
#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "core/trace.h"
#include "model/llama_parameters.h"
#include "parallel/engine.h"

namespace anvil {

void DataParallelEngine::begin_pass(Pass pass) {
  pass_ = pass;
  gatherer_.begin_pass(pass == Pass::train);
}

void DataParallelEngine::end_pass() {
  gatherer_.end_pass();
  pass_ = Pass::idle;
}

void DataParallelEngine::before_forward(int group) {
  if (inference_ && group == kEmbeddingGroup) begin_pass(Pass::eval);
  reducer_.poll(false);
  if (stage_ == 3) gatherer_.acquire(group);
  if (pass_ == Pass::train && group == head_ && stage_ >= 2) {
    // The head runs forward and backward in one go; with tied embeddings it also adds to the
    // embedding's gradient, which is complete only at the very end of the pass.
    if (tied_) reducer_.bind_slot(kEmbeddingGroup);
    reducer_.bind_slot(head_);
    reducer_.start_running_sum_gather(head_);
  }
  open_group_span(group, true);
}

void DataParallelEngine::after_forward(int group) {
  close_group_span(group);
  if (stage_ == 3) gatherer_.release(group);
  reducer_.poll(false);
  if (inference_ && group == head_) end_pass();
}

void DataParallelEngine::before_backward(int group) {
  reducer_.poll(false);
  // An untied embedding's backward reads no weight (stage3_weight_uses).
  if (stage_ == 3 && (tied_ || group != kEmbeddingGroup)) gatherer_.acquire(group);
  if (pass_ == Pass::train && stage_ >= 2) {
    if (!(tied_ && group == kEmbeddingGroup)) reducer_.bind_slot(group);
    reducer_.start_running_sum_gather(group);
  }
  open_group_span(group, false);
}

void DataParallelEngine::after_backward(int group) {
  close_group_span(group);
  if (stage_ == 3) gatherer_.release(group);
  if (pass_ == Pass::train) reducer_.reduce(group);
  reducer_.poll(false);
}

void DataParallelEngine::open_group_span(int group, bool forward) {
  group_span_.session = TraceRecorder::instance().session();
  if (group_span_.session == 0) return;
  group_span_.begin_ns = TraceRecorder::now_ns();
  group_span_.group = group;
  // The head of a training pass runs its forward and backward fused.
  const char* kind = !forward ? "backward" : group == head_ && pass_ == Pass::train
                                                 ? "forward+backward"
                                                 : "forward";
  const std::string label = group == kEmbeddingGroup ? std::string("embedding")
                            : group == head_         ? std::string("head")
                                                     : fmt::format("layer {}", group - 1);
  group_span_.name = fmt::format("{} {}", kind, label);
  // The same span in device time: when the device ran the group's work, not when it was queued.
  group_span_.device = std::make_unique<DeviceSpan>(model_->backend(), group_span_.name);
}

void DataParallelEngine::close_group_span(int group) {
  if (group_span_.session == 0 || group_span_.group != group) return;
  group_span_.device->end();
  TraceEvent event;
  event.name = std::move(group_span_.name);
  event.category = kTraceCompute;
  event.begin_ns = group_span_.begin_ns;
  event.duration_ns = TraceRecorder::now_ns() - group_span_.begin_ns;
  event.thread = TraceRecorder::thread_id();
  event.args.push_back(TraceArg{"group", int64_t{group}});
  event.args.push_back(TraceArg{"pass", std::string(pass_ == Pass::train ? "train" : "eval")});
  if (pass_ == Pass::train) event.args.push_back(TraceArg{"micro_step", int64_t{micro_step_}});
  TraceRecorder::instance().add(group_span_.session, std::move(event));
  group_span_.session = 0;
}

void DataParallelEngine::run_gather_only_pass() {
  begin_pass(Pass::eval);
  for (const int group : std::vector<int>(gatherer_.uses())) {
    before_forward(group);
    after_forward(group);
  }
  end_pass();
}

}  // namespace anvil
