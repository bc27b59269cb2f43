// DataParallelEngine: state allocation, the training step and evaluation. The group hooks
// (gathers and gradient reductions) live in engine_hooks.cpp.
#include "parallel/engine.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/error.h"
#include "core/trace.h"
#include "model/llama_parameters.h"
#include "model/lora.h"
#include "parallel/collectives.h"
#include "parallel/rank_buffers.h"

namespace anvil {
namespace {

Tensor whole(const Buffer& buffer) {
  return buffer.as(DType::f32, Shape{static_cast<int64_t>(buffer.bytes() / sizeof(float))});
}

}  // namespace

ModelOptions DataParallelEngine::model_options(ModelOptions options, int zero_stage) {
  options.allocate_weights = zero_stage == 0;
  options.allocate_compute_copies = zero_stage == 0;  // stages 1-3 bind theirs (not LoRA)
  options.allocate_gradients = zero_stage <= 1;
  options.allocate_frozen = zero_stage <= 2;
  return options;
}

ModelOptions DataParallelEngine::model_options(ModelOptions options, const DeviceMesh& mesh) {
  options.tp = mesh.tensor_parallel();
  options.cp = mesh.context_parallel();
  return model_options(options, mesh.zero_stage());
}

DataParallelEngine::DataParallelEngine(LlamaModel& model, DeviceMesh& mesh,
                                       const EngineOptions& options)
    : model_(&model),
      mesh_(&mesh),
      options_(options),
      stage_(mesh.zero_stage()),
      head_(head_group(model.config())),
      tied_(model.config().tie_embeddings),
      plan_(model.trainable().layout(), mesh.data_world(), mesh.shard_count(), mesh.data_rank()),
      lora_(model.lora_enabled()),
      spans_(layout_decay_spans(model.trainable().layout())) {
  const TensorParallel& tp = model.options().tp;
  ANVIL_CHECK(tp.size == mesh.shape().tp && tp.rank == mesh.tp_index(),
              "[parallel] the model holds tp shard {} of {} but this rank is tp rank {} of {}; "
              "build it with DataParallelEngine::model_options(options, mesh)",
              tp.rank, tp.size, mesh.tp_index(), mesh.shape().tp);
  const ContextParallel& cp = model.options().cp;
  ANVIL_CHECK(cp.size == mesh.shape().cp && cp.rank == mesh.cp_index(),
              "[parallel] the model holds the rows of cp rank {} of {} but this rank is cp rank {} "
              "of {}; build it with DataParallelEngine::model_options(options, mesh)",
              cp.rank, cp.size, mesh.cp_index(), mesh.shape().cp);
  ANVIL_CHECK(options.micro_batches >= 1, "[parallel] micro_batches must be >= 1, got {}",
              options.micro_batches);
  // Group 1 (layer 0) exists in every layout and is never empty.
  const int probe = layer_group(0);
  const bool weights_allocated = model.trainable().has_storage(probe);
  const bool gradients_allocated = model.trainable_gradients().has_storage(probe);
  const bool frozen_allocated = model.parameters().has_storage(probe);
  ANVIL_CHECK(weights_allocated == (stage_ == 0) && gradients_allocated == (stage_ <= 1) &&
                  (!lora_ || frozen_allocated == (stage_ <= 2)),
              "[parallel] the model for ZeRO stage {} must be built with "
              "DataParallelEngine::model_options",
              stage_);
  if (lora_) {
    frozen_plan_ = ShardPlan(model.parameters().layout(), mesh.data_world(), mesh.shard_count(),
                             mesh.data_rank());
  }
  allocate_state(options.micro_batches);
  if (mesh.offload()) {
    OffloadedGroups groups;
    groups.device = &model.backend();
    groups.plan = &plan_;
    groups.state = &state_;
    groups.spans = &spans_;
    groups.device_weights = [this](int group) { return optimizer_weights(group); };
    groups.device_gradients = [this](int group) { return optimizer_gradients(group); };
    groups.shards_offloaded = stage_ == 3;
    groups.params_offloaded = stage_ == 3 && mesh.offload_params();
    offload_ = std::make_unique<OffloadedOptimizer>(groups, options.hyper);
    io_.set_offload(offload_.get());
  } else {
    build_optimizer();
  }
  model.set_group_hooks(this);
  // The ordered sums' staging is the backend's memory, counted there as communication (until
  // the engine is gone): host memory on a CPU backend (MPI), device memory on cuda (NCCL); the
  // stream communicator of other backends keeps staging of its own.
  mesh.set_staging_allocator(&model.backend());
}

DataParallelEngine::~DataParallelEngine() {
  gatherer_.wait_all();
  model_->set_group_hooks(nullptr);
  mesh_->set_staging_allocator(nullptr);
}

void DataParallelEngine::allocate_state(int micro_batches) {
  RankBufferInputs inputs;
  inputs.shard_config = model_->shard_config();
  inputs.trainable = &model_->trainable().layout();
  inputs.plan = &plan_;
  inputs.frozen_plan = lora_ ? &frozen_plan_ : nullptr;
  inputs.model = model_->options();
  inputs.parallel = mesh_->settings();
  inputs.micro_batches = micro_batches;
  inputs.data_rank = mesh_->data_rank();
  inputs.data_world = mesh_->data_world();
  state_ = RankState(model_->backend(), plan_rank_buffers(inputs), plan_.group_count(),
                     lora_ ? frozen_plan_.group_count() : 0);
  ANVIL_CHECK(stage_ == 0 || binds_compute_weights(model_->options(), stage_) ==
                                 model_->binds_compute_weights(),
              "[parallel] the model's compute weights do not follow its options");
  gatherer_ = WeightGatherer(*model_, *mesh_, plan_, lora_ ? &frozen_plan_ : nullptr, state_);
  io_ = WeightIO(*model_, *mesh_, plan_, lora_ ? &frozen_plan_ : nullptr, state_, gatherer_);
  reducer_ = GradientReducer(*model_, *mesh_, plan_, state_, micro_batches);
  reducer_.set_progress([this] { gatherer_.poll(); });
  reducer_.set_host_gradient([this](int group) { return offload_->gradient(group); });
  norm_ = GradientNorm(model_->backend(), mesh_->world(), plan_, model_->trainable().layout(),
                       mesh_->tp_index(), state_.step_results(), micro_batches, mesh_->offload());
  if (stage_ == 3 && mesh_->offload())
    gatherer_.set_before_gather([this](int group) { offload_->upload_stale_shard(group); });
  // Stages 1-2 hand the model their replicas to compute with.
  for (int g = 0; g < plan_.group_count(); ++g) {
    const Buffer& replica = state_.group(g).replica;
    if (replica.data() == nullptr) continue;
    if (compute_replica()) {
      gatherer_.bind_views(g, replica);
    } else {
      model_->bind_trainable_weights(g, whole(replica));
    }
  }
}

Tensor DataParallelEngine::optimizer_weights(int group) const {
  const GroupShard& s = plan_.group(group);
  const GroupStorage& st = state_.group(group);
  if (sharded_masters()) return whole(st.weight_shard).flat(0, s.shard_length);
  return model_->trainable().group(group).flat(s.shard_begin, s.shard_length);
}

std::shared_ptr<const ParameterLayout> DataParallelEngine::trainable_layout_at_tp(int tp) const {
  const LlamaConfig shard = tp_shard_config(model_->config(), tp);
  if (lora_) return make_lora_layout(shard, model_->options().lora);
  return make_llama_layout(shard, model_->options().decay_embeddings);
}

Tensor DataParallelEngine::optimizer_gradients(int group) const {
  const GroupShard& s = plan_.group(group);
  if (stage_ >= 2) {
    return whole(state_.group(group).grad_shard).flat(0, s.shard_length);
  }
  return model_->trainable_gradients().group(group).flat(s.shard_begin, s.shard_length);
}

Tensor DataParallelEngine::reduced_gradient_slice(int group) const {
  const GroupShard& s = plan_.group(group);
  if (stage_ >= 2) {
    return whole(state_.group(group).grad_shard)
        .flat(static_cast<int64_t>(mesh_->dp_index()) * s.slice, s.slice_length);
  }
  return model_->trainable_gradients().group(group).flat(s.slice_begin, s.slice_length);
}

void DataParallelEngine::build_optimizer() {
  std::vector<OptimizerGroup> groups;
  for (int g = 0; g < plan_.group_count(); ++g) {
    const GroupShard& s = plan_.group(g);
    if (s.shard_length == 0) continue;
    OptimizerGroup group;
    group.params = optimizer_weights(g);
    group.grads = optimizer_gradients(g);
    group.spans = spans_in_range(spans_[static_cast<size_t>(g)], s.shard_begin, s.shard_length);
    state_.group(g).optimizer_index = static_cast<int>(groups.size());
    groups.push_back(std::move(group));
  }
  optimizer_ = std::make_unique<AdamW>(model_->backend(), std::move(groups), options_.hyper);
}

Tensor DataParallelEngine::moment(int group, int which) const {
  const int index = state_.group(group).optimizer_index;
  if (index < 0) return Tensor();
  const std::vector<NamedTensor> state =
      offloaded() ? offload_->host().state_tensors() : optimizer_->state_tensors();
  return state[static_cast<size_t>(2 * index + which)].tensor;
}

Backend& DataParallelEngine::optimizer_backend() const {
  return offloaded() ? offload_->host().backend() : model_->backend();
}

int64_t DataParallelEngine::optimizer_steps() const {
  return offloaded() ? offload_->host().step_count() : optimizer_->step_count();
}

void DataParallelEngine::set_optimizer_steps(int64_t steps) {
  if (offloaded()) {
    offload_->host().set_step_count(steps);
  } else {
    optimizer_->set_step_count(steps);
  }
}

StepReport DataParallelEngine::train_step(std::span<const Batch> micro_batches, double lr,
                                          double loss_scale) {
  ANVIL_CHECK(static_cast<int>(micro_batches.size()) == options_.micro_batches,
              "[parallel] a step takes {} micro-batches per rank, got {}", options_.micro_batches,
              micro_batches.size());
  Communicator& data = mesh_->data();
  const std::span<const Batch> local_batches = rows_of_this_rank(micro_batches);
  // The loss is sum(token losses) / N over the global batch, so every micro-batch's
  // gradient is scaled by 1/N with N counted on every rank before any backward runs (under
  // context parallelism each rank counts its own rows, and data() spans the cp ranks).
  int64_t local_tokens = 0;
  for (const Batch& batch : local_batches) local_tokens += model_->count_loss_tokens(batch);
  StepReport report;
  report.loss.count = all_ranks_sum(data, local_tokens);
  ANVIL_CHECK(report.loss.count > 0, "[parallel] the global batch has no trained target tokens");
  const float grad_scale =
      static_cast<float>(loss_scale / static_cast<double>(report.loss.count));

  if (stage_ <= 1) model_->trainable_gradients().zero();
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    micro_step_ = static_cast<int>(m);
    reducer_.begin_micro_step(micro_step_);
    model_->set_dropout_micro_batch(static_cast<int64_t>(m) * mesh_->sample_world() +
                                    mesh_->sample_rank());
    begin_pass(Pass::train);
    model_->forward_backward(local_batches[m], grad_scale, norm_.loss_sum_slot(static_cast<int>(m)));
    end_pass();
    reducer_.finish_micro_step(m + 1 == micro_batches.size());
  }
  // Offload: the reduced gradients go to the host now; the norm below reads them there.
  if (offloaded()) offload_->copy_gradients_to_host();
  ExactSquareSum local_squares;
  {
    TraceSpan span("grad norm", kTraceCompute);
    const DeviceSpan device(model_->backend(), "grad norm");
    // Offloaded, the norm reads the host optimizer's copies of the reduced gradients.
    norm_.add_local_squares(local_squares, [this](int group) {
      if (!offloaded()) return reduced_gradient_slice(group);
      const GroupShard& s = plan_.group(group);
      return offload_->gradient(group).flat(s.slice_begin - s.shard_begin, s.slice_length);
    });
  }
  // The step's one readback: every micro-batch's loss sum and the norm's digit counters.
  TraceSpan wait_span("read loss and norm", kTraceHostWait);
  const GradientNorm::StepResults results = norm_.read_step_results();
  wait_span.end();
  if (!offloaded()) local_squares.add_digit_counters(results.counters);
  // Global micro-batch j = m * world + r: add the sums in that order, as one process would
  // (under context parallelism each micro-batch's sum is itself its cp ranks' partial sums).
  const std::vector<double> all_sums = all_gather_doubles(data, results.loss_sums);
  const size_t ranks = static_cast<size_t>(data.size());
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    for (size_t r = 0; r < ranks; ++r) report.loss.sum += all_sums[r * micro_batches.size() + m];
  }
  report.grad_norm = norm_.global_grad_norm(local_squares) / loss_scale;
  report.clip_scale = clip_coefficient(report.grad_norm, options_.grad_clip);
  // Both values are global (all-gathered, summed in one order), so every rank takes the
  // same branch and no collective below is left unmatched.
  if (!std::isfinite(report.grad_norm) || !std::isfinite(report.loss.sum)) {
    report.applied = false;
    return report;
  }
  gatherer_.wait_all();  // no gather may still read the shards the step rewrites
  if (offloaded()) {
    // Each group's publish starts as its update arrives, beside the host's next group.
    std::vector<std::unique_ptr<CommHandle>> gathers;
    offload_->step(lr, report.clip_scale / loss_scale, [&](int group) {
      for (auto& gather : start_publish(group)) gathers.push_back(std::move(gather));
    });
    finish_publish(gathers);
    return report;
  }
  {
    TraceSpan span("optimizer step", kTraceCompute);
    const DeviceSpan device(model_->backend(), "optimizer step");
    span.arg("lr", lr).arg("clip_scale", report.clip_scale);
    optimizer_->step(lr, report.clip_scale / loss_scale);
  }
  publish_weights();
  return report;
}

void DataParallelEngine::publish_weights() {
  std::vector<std::unique_ptr<CommHandle>> gathers;
  for (int g = 0; g < plan_.group_count(); ++g) {
    for (auto& gather : start_publish(g)) gathers.push_back(std::move(gather));
  }
  finish_publish(gathers);
}

std::vector<std::unique_ptr<CommHandle>> DataParallelEngine::start_publish(int group) {
  const GroupShard& s = plan_.group(group);
  std::vector<std::unique_ptr<CommHandle>> gathers;
  if (stage_ == 0 || stage_ == 3 || s.numel == 0) return gathers;
  const GroupStorage& st = state_.group(group);
  if (compute_replica()) return gatherer_.gather_into(group, st.replica, false);
  if (mesh_->shard_count() == 1) return gathers;
  const Tensor replica = whole(st.replica);
  gathers.push_back(mesh_->fsdp().all_gather_async(replica.flat(s.shard_begin, s.shard), replica));
  return gathers;
}

void DataParallelEngine::finish_publish(std::vector<std::unique_ptr<CommHandle>>& gathers) {
  for (auto& gather : gathers) gather->wait();
  for (int g = 0; compute_replica() && g < plan_.group_count(); ++g) {
    if (plan_.group(g).numel > 0) gatherer_.prepare(g, state_.group(g).replica);
  }
  if (stage_ == 3) gatherer_.forget_cached();  // the shards changed
}

std::span<const Batch> DataParallelEngine::rows_of_this_rank(std::span<const Batch> batches) {
  const ContextParallel& cp = model_->options().cp;
  if (!cp.enabled()) return batches;
  local_rows_.resize(batches.size());
  local_batches_.clear();
  for (size_t i = 0; i < batches.size(); ++i)
    local_batches_.push_back(cp_local_batch(cp, batches[i], local_rows_[i]));
  return local_batches_;
}

LossSum DataParallelEngine::evaluate(int64_t count, const std::function<Batch(int64_t)>& batch_at) {
  Communicator& data = mesh_->data();
  // The cp ranks of a group evaluate the same batches (each its rows): batches go round the
  // sample ranks, and the sums round all of data() (sample rank r's cp ranks are r cp + i).
  const int ranks = mesh_->sample_world();
  const int cp_size = mesh_->shape().cp;
  const int64_t rounds = (count + ranks - 1) / ranks;
  std::vector<double> sums(static_cast<size_t>(rounds), 0.0);
  std::vector<int64_t> counts(static_cast<size_t>(rounds), 0);
  for (int64_t k = 0; k < rounds; ++k) {
    const int64_t index = k * ranks + mesh_->sample_rank();
    if (index < count) {
      const Batch whole = batch_at(index);
      begin_pass(Pass::eval);
      const LossSum loss = model_->forward_loss(rows_of_this_rank({&whole, 1})[0]);
      end_pass();
      sums[static_cast<size_t>(k)] = loss.sum;
      counts[static_cast<size_t>(k)] = loss.count;
    } else if (stage_ == 3) {
      run_gather_only_pass();  // the other ranks' passes gather weights from this one too
    }
  }
  const std::vector<double> all_sums = all_gather_doubles(data, sums);
  const std::vector<int64_t> all_counts = all_gather_int64s(data, counts);
  LossSum total;
  for (int64_t k = 0; k < rounds; ++k) {
    for (int r = 0; r < ranks && k * ranks + r < count; ++r) {
      for (int i = 0; i < cp_size; ++i) {
        const size_t at = static_cast<size_t>((r * cp_size + i) * rounds + k);
        total += LossSum{all_sums[at], all_counts[at]};
      }
    }
  }
  return total;
}

void DataParallelEngine::run_inference(const std::function<void()>& body) {
  ANVIL_CHECK(pass_ == Pass::idle, "[engine] run_inference inside another pass");
  inference_ = true;
  try {
    body();
  } catch (...) {
    inference_ = false;
    if (pass_ != Pass::idle) end_pass();
    throw;
  }
  inference_ = false;
}

}  // namespace anvil
