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
#include "parallel/collectives.h"

namespace anvil {
namespace {

Buffer zeroed_buffer(Backend& backend, int64_t elements, MemoryCategory category) {
  Buffer buffer(backend, static_cast<size_t>(elements) * sizeof(float), category);
  backend.fill_zero(buffer.as(DType::f32, Shape{elements}));
  return buffer;
}

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
      spans_(layout_decay_spans(model.trainable().layout())),
      fast_(mesh.reduce_mode() == ReduceMode::fast),
      reduce_dtype_(reduction_dtype(mesh.reduce_mode(), mesh.reduce_dtype(), mesh.data_world())) {
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
  norm_ranges_ = norm_ranges();
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
    build_host_optimizer();
  } else {
    build_optimizer();
  }
  gradient_slot_of_.assign(static_cast<size_t>(plan_.group_count()), -1);
  model.set_group_hooks(this);
  // The ordered sums' staging is the backend's memory, counted there as communication (until
  // the engine is gone): host memory on a CPU backend (MPI), device memory on cuda (NCCL); the
  // stream communicator of other backends keeps staging of its own.
  mesh.set_staging_allocator(&model.backend());
}

DataParallelEngine::~DataParallelEngine() {
  wait_weight_slots();
  model_->set_group_hooks(nullptr);
  mesh_->set_staging_allocator(nullptr);
  // With offload_params the weight shards are memory of the host optimizer's backend, which
  // goes first among the members: they are freed before it.
  storage_.clear();
}

void DataParallelEngine::allocate_state(int micro_batches) {
  Backend& backend = model_->backend();
  // Exact sums keep a running sum of earlier micro-steps; fast ones accumulate in place.
  const bool running_sum_here = !fast_ && mesh_->data_rank() == 0 && micro_batches > 1;
  const bool shards_offloaded = stage_ == 3 && mesh_->offload();
  const DType dtype = model_->parameters().dtype();
  compute_replica_ = (stage_ == 1 || stage_ == 2) && model_->binds_compute_weights();
  if (sharded_masters()) {
    gather_dtype_ = model_->binds_compute_weights() ? model_->options().compute_dtype : DType::f32;
    slot_plan_ = plan_weight_slots(model_->shard_config(), model_->trainable().layout(), plan_,
                                   lora_ ? &frozen_plan_ : nullptr, dtype, gather_dtype_,
                                   mesh_->prefetch(), mesh_->reshard_after_forward());
  }
  storage_.resize(static_cast<size_t>(plan_.group_count()));
  for (int g = 0; g < plan_.group_count(); ++g) {
    const GroupShard& s = plan_.group(g);
    if (s.numel == 0) continue;  // nothing trains here (LoRA's embedding and head groups)
    GroupStorage& st = storage_[static_cast<size_t>(g)];
    if (compute_replica_) {
      // The weights once in the compute dtype (the model's compute copies, so workspace)
      // beside this rank's f32 master shard.
      const size_t bytes = slot_plan_.groups[static_cast<size_t>(g)].bytes;
      st.replica = Buffer(backend, bytes, MemoryCategory::workspace);
      backend.fill_zero(st.replica.as(DType::u16, Shape{static_cast<int64_t>(bytes / 2)}));
      bind_group_views(g, st.replica);
      st.weight_shard = zeroed_buffer(backend, s.shard, MemoryCategory::trainable_weights);
    } else if (stage_ == 1 || stage_ == 2) {
      st.replica = zeroed_buffer(backend, s.padded, MemoryCategory::trainable_weights);
      model_->bind_trainable_weights(g, whole(st.replica));
    }
    if (stage_ == 3 && shards_offloaded && mesh_->offload_params()) {
      // In host memory, allocated with the host optimizer (build_host_optimizer).
    } else if (stage_ == 3 && shards_offloaded) {
      const size_t bytes =
          offloaded_shard_bytes(slot_plan_.groups[static_cast<size_t>(g)], s, gather_dtype_);
      st.weight_shard = Buffer(backend, bytes, MemoryCategory::trainable_weights);
      backend.fill_zero(st.weight_shard.as(DType::u16, Shape{static_cast<int64_t>(bytes / 2)}));
    } else if (stage_ == 3) {
      st.weight_shard = zeroed_buffer(backend, s.shard, MemoryCategory::trainable_weights);
    }
    if (stage_ >= 2 && !shards_offloaded)
      st.grad_shard = zeroed_buffer(backend, s.shard, MemoryCategory::gradients);
    if (stage_ <= 1 && running_sum_here)
      st.grad_sum = zeroed_buffer(backend, s.numel, MemoryCategory::gradients);
    if (stage_ <= 1 && reduce_dtype_ != DType::f32)
      st.reduce_cast = Buffer(backend, static_cast<size_t>(s.numel) * dtype_size(reduce_dtype_),
                              MemoryCategory::communication);
  }
  if (shards_offloaded) {
    device_shard_stale_.assign(static_cast<size_t>(plan_.group_count()), false);
    const GradientSlotPlan staging = plan_shard_staging(model_->config(), plan_);
    for (int k = 0; k < 2; ++k) {
      shard_staging_[k] = SlotPool(backend, staging.count[k], staging.elements[k]);
      staging_downloads_[k].resize(static_cast<size_t>(staging.count[k]));
    }
    offload_stream_ = backend.create_stream();
    if (!fast_ && micro_batches > 1)  // exact: the running sum goes back up
      running_sum_source_ = SlotPool(backend, 1, plan_.max_padded() / mesh_->data_world());
  }
  step_results_ = Buffer(backend, step_result_bytes(micro_batches, mesh_->offload()),
                         MemoryCategory::workspace);
  if (stage_ == 3) {
    if (lora_) {
      frozen_shards_.resize(static_cast<size_t>(frozen_plan_.group_count()));
      for (int g = 0; g < frozen_plan_.group_count(); ++g) {
        const int64_t shard = frozen_plan_.group(g).shard;
        frozen_shards_[g] = Buffer(backend, static_cast<size_t>(shard) * dtype_size(dtype),
                                   MemoryCategory::frozen_weights);
        if (shard > 0) backend.fill_zero(frozen_shard(g));
      }
    }
    for (int k = 0; k < 2; ++k)
      weight_pools_[k] = SlotPool(backend, slot_plan_.count[k], slot_plan_.bytes[k]);
  }
  if (stage_ >= 2) {
    gradient_plan_ = plan_gradient_slots(model_->config(), plan_);
    for (int k = 0; k < 2; ++k)
      gradient_pools_[k] = SlotPool(backend, gradient_plan_.count[k], gradient_plan_.elements[k]);
    if (!fast_ && micro_batches > 1) running_sum_slot_ = SlotPool(backend, 1, plan_.max_padded());
    for (size_t k = 0; fast_ && k < 2; ++k) {
      scatter_scratch_plan_[k] = plan_scatter_scratch(gradient_plan_.elements[k],
                                                      mesh_->data_world(), reduce_dtype_,
                                                      micro_batches);
      if (scatter_scratch_plan_[k].bytes > 0)
        scatter_scratch_[k] =
            SlotPool(backend, gradient_plan_.count[k], scatter_scratch_plan_[k].bytes);
    }
  }
}

Tensor DataParallelEngine::model_weights(int group) const {
  return model_->trainable().group(group);
}

Tensor DataParallelEngine::frozen_shard(int group) const {
  const DType dtype = model_->parameters().dtype();
  return frozen_shards_[static_cast<size_t>(group)].as(dtype,
                                                       Shape{frozen_plan_.group(group).shard});
}

Tensor DataParallelEngine::frozen_slot_view(int slot, int group) const {
  return weight_pool(group).view(slot, model_->parameters().dtype(),
                                 slot_plan_.groups[static_cast<size_t>(group)].frozen_offset,
                                 frozen_plan_.group(group).padded);
}

Tensor DataParallelEngine::optimizer_weights(int group) const {
  const GroupShard& s = plan_.group(group);
  const GroupStorage& st = storage_[static_cast<size_t>(group)];
  if (sharded_masters()) return whole(st.weight_shard).flat(0, s.shard_length);
  return model_weights(group).flat(s.shard_begin, s.shard_length);
}

Tensor DataParallelEngine::optimizer_gradients(int group) const {
  const GroupShard& s = plan_.group(group);
  if (stage_ >= 2) {
    return whole(storage_[static_cast<size_t>(group)].grad_shard).flat(0, s.shard_length);
  }
  return model_->trainable_gradients().group(group).flat(s.shard_begin, s.shard_length);
}

Tensor DataParallelEngine::host_master(int group) const {
  const int index = storage_[static_cast<size_t>(group)].optimizer_index;
  return index < 0 ? Tensor() : host_optimizer_->master(index);
}

Tensor DataParallelEngine::host_gradient(int group) const {
  const int index = storage_[static_cast<size_t>(group)].optimizer_index;
  return index < 0 ? Tensor() : host_optimizer_->gradient(index);
}

Tensor DataParallelEngine::reduced_gradient_slice(int group) const {
  const GroupShard& s = plan_.group(group);
  if (stage_ >= 2) {
    return whole(storage_[static_cast<size_t>(group)].grad_shard)
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
    storage_[static_cast<size_t>(g)].optimizer_index = static_cast<int>(groups.size());
    groups.push_back(std::move(group));
  }
  optimizer_ = std::make_unique<AdamW>(model_->backend(), std::move(groups), options_.hyper);
}

Tensor DataParallelEngine::moment(int group, int which) const {
  const int index = storage_[static_cast<size_t>(group)].optimizer_index;
  if (index < 0) return Tensor();
  const std::vector<NamedTensor> state =
      offloaded() ? host_optimizer_->state_tensors() : optimizer_->state_tensors();
  return state[static_cast<size_t>(2 * index + which)].tensor;
}

Backend& DataParallelEngine::optimizer_backend() const {
  return offloaded() ? host_optimizer_->backend() : model_->backend();
}

int64_t DataParallelEngine::optimizer_steps() const {
  return offloaded() ? host_optimizer_->step_count() : optimizer_->step_count();
}

void DataParallelEngine::set_optimizer_steps(int64_t steps) {
  if (offloaded()) {
    host_optimizer_->set_step_count(steps);
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
    model_->set_dropout_micro_batch(static_cast<int64_t>(m) * mesh_->sample_world() +
                                    mesh_->sample_rank());
    begin_pass(Pass::train);
    model_->forward_backward(local_batches[m], grad_scale, loss_sum_slot(static_cast<int>(m)));
    end_pass();
    finish_micro_step(m + 1 == micro_batches.size());
  }
  // Offload: the reduced gradients go to the host now; the norm below reads them there.
  if (offloaded()) copy_gradients_to_host();
  ExactSquareSum local_squares;
  {
    TraceSpan span("grad norm", kTraceCompute);
    const DeviceSpan device(model_->backend(), "grad norm");
    add_local_squares(local_squares);
  }
  // The step's one readback: every micro-batch's loss sum and the norm's digit counters.
  TraceSpan wait_span("read loss and norm", kTraceHostWait);
  const StepResults results = read_step_results();
  wait_span.end();
  if (!offloaded()) local_squares.add_digit_counters(results.counters);
  // Global micro-batch j = m * world + r: add the sums in that order, as one process would
  // (under context parallelism each micro-batch's sum is itself its cp ranks' partial sums).
  const std::vector<double> all_sums = all_gather_doubles(data, results.loss_sums);
  const size_t ranks = static_cast<size_t>(data.size());
  for (size_t m = 0; m < micro_batches.size(); ++m) {
    for (size_t r = 0; r < ranks; ++r) report.loss.sum += all_sums[r * micro_batches.size() + m];
  }
  report.grad_norm = global_grad_norm(local_squares) / loss_scale;
  report.clip_scale = clip_coefficient(report.grad_norm, options_.grad_clip);
  // Both values are global (all-gathered, summed in one order), so every rank takes the
  // same branch and no collective below is left unmatched.
  if (!std::isfinite(report.grad_norm) || !std::isfinite(report.loss.sum)) {
    report.applied = false;
    return report;
  }
  wait_weight_slots();  // no gather may still read the shards the step rewrites
  if (offloaded()) {
    offloaded_step(lr, report.clip_scale / loss_scale);
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

void DataParallelEngine::wait_weight_slots() {
  for (SlotPool& pool : weight_pools_) pool.wait_all();
}

void DataParallelEngine::forget_weight_slots() {
  for (SlotPool& pool : weight_pools_) pool.forget_cached();
}

std::vector<std::vector<DataParallelEngine::ElementRange>> DataParallelEngine::norm_ranges() const {
  const ParameterLayout& layout = model_->trainable().layout();
  std::vector<std::vector<ElementRange>> ranges(static_cast<size_t>(layout.group_count()));
  if (mesh_->tp_index() == 0) {
    for (int g = 0; g < layout.group_count(); ++g)
      ranges[static_cast<size_t>(g)].push_back(ElementRange{0, layout.group_numel(g)});
    return ranges;
  }
  // Tp rank 0 counts the replicated parameters; padding holds zeros and may be skipped.
  for (const ParameterInfo& p : layout.params()) {
    if (p.split_dim >= 0) ranges[static_cast<size_t>(p.group)].push_back({p.offset, p.numel()});
  }
  return ranges;
}

int64_t DataParallelEngine::step_result_bytes(int micro_batches, bool offload) {
  return int64_t{micro_batches} * static_cast<int64_t>(sizeof(double)) +
         (offload ? 0 : kNormCounterBytes);
}

Tensor DataParallelEngine::loss_sum_slot(int micro_step) const {
  return buffer_view(step_results_, DType::u32, static_cast<size_t>(micro_step) * sizeof(double),
                     2);
}

Tensor DataParallelEngine::norm_counters() const {
  const size_t offset = static_cast<size_t>(options_.micro_batches) * sizeof(double);
  return buffer_view(step_results_, DType::u32, offset, 2 * kExactCounterCount);
}

DataParallelEngine::StepResults DataParallelEngine::read_step_results() {
  const int64_t bytes = static_cast<int64_t>(step_results_.bytes());
  std::vector<uint64_t> words(static_cast<size_t>(bytes) / sizeof(uint64_t));
  model_->backend().copy_to_host(words.data(),
                                 buffer_view(step_results_, DType::u32, 0, bytes / 4));
  StepResults results;
  results.loss_sums.resize(static_cast<size_t>(options_.micro_batches));
  std::memcpy(results.loss_sums.data(), words.data(), results.loss_sums.size() * sizeof(double));
  if (!offloaded()) {
    std::copy_n(words.begin() + options_.micro_batches, kExactCounterCount,
                results.counters.begin());
  }
  return results;
}

void DataParallelEngine::add_device_squares(const Tensor& values, ExactSquareSum& sum) {
  Backend& backend = model_->backend();
  for (int64_t done = 0; done < values.numel();) {
    if (norm_counter_fill_ == kExactCounterCapacity) {  // full: fold them, start again
      fold_norm_counters(sum);
      backend.fill_zero(norm_counters());
      norm_counter_fill_ = 0;
    }
    const int64_t count =
        std::min(values.numel() - done, kExactCounterCapacity - norm_counter_fill_);
    backend.accumulate_exact_squares(values.flat(done, count), norm_counters());
    norm_counter_fill_ += count;
    done += count;
  }
}

void DataParallelEngine::fold_norm_counters(ExactSquareSum& sum) {
  ExactSquareSum::DigitCounters counters;
  model_->backend().copy_to_host(counters.data(), norm_counters());
  sum.add_digit_counters(counters);
}

void DataParallelEngine::add_local_squares(ExactSquareSum& local) {
  // This rank's squares: on the device into the digit counters, which reach the host with the
  // step's results (a few dozen words, not the gradient); offloaded, from the host
  // optimizer's copies.
  if (!offloaded()) {
    model_->backend().fill_zero(norm_counters());
    norm_counter_fill_ = 0;
  }
  for (int g = 0; g < plan_.group_count(); ++g) {
    const GroupShard& s = plan_.group(g);
    if (s.slice_length == 0) continue;  // this rank's slice is all padding
    const int index = storage_[static_cast<size_t>(g)].optimizer_index;
    const Tensor slice = offloaded() ? host_optimizer_->gradient(index).flat(
                                           s.slice_begin - s.shard_begin, s.slice_length)
                                     : reduced_gradient_slice(g);
    for (const ElementRange& range : norm_ranges_[static_cast<size_t>(g)]) {
      const int64_t lo = std::max(range.begin, s.slice_begin);
      const int64_t hi = std::min(range.begin + range.length, s.slice_begin + s.slice_length);
      if (lo >= hi) continue;
      const Tensor part = slice.flat(lo - s.slice_begin, hi - lo);
      if (offloaded()) {
        local.add_squares(part.f32(), part.numel());
      } else {
        add_device_squares(part, local);
      }
    }
  }
}

double DataParallelEngine::global_grad_norm(const ExactSquareSum& local) {
  const ExactSquareSum::Words words = local.to_words();
  const std::vector<uint64_t> all = all_gather_words(mesh_->world(), words);
  ExactSquareSum total;
  for (size_t r = 0; r < all.size() / words.size(); ++r) {
    ExactSquareSum::Words rank_words;
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(r * words.size()), words.size(),
                rank_words.begin());
    total.add(ExactSquareSum::from_words(rank_words));
  }
  return std::sqrt(total.value());
}

void DataParallelEngine::publish_weights() {
  if (stage_ == 3) {
    forget_weight_slots();
    return;
  }
  std::vector<std::unique_ptr<CommHandle>> gathers;
  for (int g = 0; g < plan_.group_count(); ++g) {
    for (auto& gather : start_publish(g)) gathers.push_back(std::move(gather));
  }
  for (auto& gather : gathers) gather->wait();
  for (int g = 0; g < plan_.group_count(); ++g) finish_publish(g);
}

std::vector<std::unique_ptr<CommHandle>> DataParallelEngine::start_publish(int group) {
  const GroupShard& s = plan_.group(group);
  std::vector<std::unique_ptr<CommHandle>> gathers;
  if (stage_ == 0 || stage_ == 3 || s.numel == 0) return gathers;
  const GroupStorage& st = storage_[static_cast<size_t>(group)];
  if (compute_replica_) return gather_group_into(group, st.replica, false);
  if (mesh_->shard_count() == 1) return gathers;
  const Tensor replica = whole(st.replica);
  gathers.push_back(mesh_->fsdp().all_gather_async(replica.flat(s.shard_begin, s.shard), replica));
  return gathers;
}

void DataParallelEngine::finish_publish(int group) {
  if (compute_replica_ && plan_.group(group).numel > 0)
    prepare_gathered(group, storage_[static_cast<size_t>(group)].replica);
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
