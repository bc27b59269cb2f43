// WeightIO: initialisation, checkpoint load and save and the frozen LoRA base in the whole
// model's coordinates (weight_io.h).
#include "parallel/weight_io.h"

#include <algorithm>
#include <functional>
#include <vector>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/tensor_parallel.h"

namespace anvil {
namespace {

// A gather target (communication).
Buffer zeroed_f32(Backend& backend, int64_t elements) {
  Buffer buffer(backend, static_cast<size_t>(elements) * sizeof(float),
                MemoryCategory::communication);
  backend.fill_zero(buffer.as(DType::f32, Shape{elements}));
  return buffer;
}

}  // namespace

WeightIO::WeightIO(LlamaModel& model, DeviceMesh& mesh, const ShardPlan& plan,
                   const ShardPlan* frozen_plan, RankState& state, WeightGatherer& gatherer)
    : model_(&model),
      mesh_(&mesh),
      plan_(&plan),
      frozen_plan_(frozen_plan),
      state_(&state),
      gatherer_(&gatherer) {}

Tensor WeightIO::master_shard(int group) const {
  const Buffer& shard = state_->group(group).weight_shard;
  return shard.as(DType::f32, Shape{static_cast<int64_t>(shard.bytes() / sizeof(float))})
      .flat(0, plan_->group(group).shard_length);
}

void WeightIO::init_weights(uint64_t seed) {
  const ParameterLayout& layout = model_->full_trainable_layout();
  std::vector<float> host;
  for (int g = 0; g < layout.group_count(); ++g) {
    if (layout.group_numel(g) == 0) continue;
    host.resize(static_cast<size_t>(layout.group_numel(g)));
    model_->init_trainable_group(g, seed, host.data());
    set_weights(g, 0, layout.group_numel(g), host.data());
  }
}

std::pair<int64_t, int64_t> WeightIO::weight_range(int group) const {
  if (tp_size() > 1) return {0, model_->full_trainable_layout().group_numel(group)};
  const GroupShard& s = plan_->group(group);
  if (stage() == 3) return {s.shard_begin, s.shard_begin + s.shard_length};
  return {0, s.numel};
}

void WeightIO::set_weights(int group, int64_t begin, int64_t count,
                                     const float* values) {
  if (tp_size() == 1) {
    set_local_weights(group, begin, count, values);
    return;
  }
  const ParameterLayout& local = model_->trainable().layout();
  const ParameterLayout& full = model_->full_trainable_layout();
  for (size_t p = 0; p < full.params().size(); ++p) {
    const ParameterInfo& fp = full.params()[p];
    if (fp.group != group) continue;
    if (fp.offset >= begin + count || fp.offset + fp.numel() <= begin) continue;
    const ParameterInfo& lp = local.params()[p];
    for (const TpRun& run : tp_runs(fp.shape, fp.split_dim, tp_size(), mesh_->tp_index())) {
      const int64_t lo = std::max(begin, fp.offset + run.global);
      const int64_t hi = std::min(begin + count, fp.offset + run.global + run.length);
      if (lo >= hi) continue;
      set_local_weights(group, lp.offset + run.local + (lo - fp.offset - run.global), hi - lo,
                        values + (lo - begin));
    }
  }
}

void WeightIO::set_local_weights(int group, int64_t begin, int64_t count,
                                           const float* values) {
  const GroupShard& s = plan_->group(group);
  const int64_t lo = stage() == 3 ? s.shard_begin : 0;
  const int64_t hi = stage() == 3 ? s.shard_begin + s.shard_length : s.numel;
  const int64_t first = std::max(begin, lo);
  const int64_t last = std::min(begin + count, hi);
  if (first >= last) return;
  gatherer_->wait_all();
  if (shards_offloaded()) {
    // The host master is the weights; the device shard follows before its next gather.
    offload_->write_master(group, first - lo, last - first, values + (first - begin));
    gatherer_->forget_cached();
    return;
  }
  if (compute_replica()) {
    // Every rank is handed the whole group: the replica takes all of it, the master shard
    // its own part.
    write_replica(group, first, last - first, values + (first - begin));
    const int64_t shard_first = std::max(first, s.shard_begin);
    const int64_t shard_last = std::min(last, s.shard_begin + s.shard_length);
    if (shard_first < shard_last) {
      model_->backend().copy_from_host(
          master_shard(group).flat(shard_first - s.shard_begin, shard_last - shard_first),
          values + (shard_first - begin));
    }
  } else {
    const Tensor target = stage() == 3 ? master_shard(group).flat(first - lo, last - first)
                                       : model_->trainable().group(group).flat(first, last - first);
    model_->backend().copy_from_host(target, values + (first - begin));
  }
  if (stage() == 3) gatherer_->forget_cached();
  if (offload_ != nullptr) offload_->mark_masters_stale();  // re-read before the step
}

void WeightIO::write_replica(int group, int64_t first, int64_t count,
                                       const float* values) {
  const SlotLayout& layout = state_->sizing().weight_slots.groups[static_cast<size_t>(group)];
  const DType gather_dtype = state_->sizing().gather_dtype;
  const Buffer& replica = state_->group(group).replica;
  const int64_t padded = plan_->group(group).padded;
  Backend& backend = model_->backend();
  // The values go up once in f32 and are cast there, as a publish casts the masters.
  const Buffer staged_buffer(backend, static_cast<size_t>(count) * sizeof(float),
                             MemoryCategory::communication);
  const Tensor staged = staged_buffer.as(DType::f32, Shape{count});
  backend.copy_from_host(staged, values);
  if (!layout.compute) {
    backend.copy(buffer_view(replica, DType::f32, 0, padded).flat(first, count), staged);
    if (layout.cast_locally) {
      backend.cast(staged, buffer_view(replica, gather_dtype, layout.compute_offset, padded)
                               .flat(first, count));
    }
    return;
  }
  backend.cast(staged,
               buffer_view(replica, gather_dtype, layout.compute_offset, padded).flat(first, count));
  const Tensor f32 = buffer_view(replica, DType::f32, layout.f32_offset, layout.parts.f32_numel);
  int64_t unpacked = 0;
  for (const ComputeParts::Range& range : layout.parts.f32) {
    const int64_t lo = std::max(first, range.offset);
    const int64_t hi = std::min(first + count, range.offset + range.length);
    if (lo < hi)
      backend.copy(f32.flat(unpacked + (lo - range.offset), hi - lo), staged.flat(lo - first, hi - lo));
    unpacked += range.length;
  }
}

void WeightIO::gather_weights(int group, float* host) {
  gather_whole_group(group, host, [&](float* local) { gather_local_weights(group, local); });
}

void WeightIO::gather_gradients(int group, float* host) {
  gather_whole_group(group, host, [&](float* local) { gather_local_gradients(group, local); });
}

void WeightIO::gather_whole_group(int group, float* host,
                                            const std::function<void(float*)>& gather_local) {
  if (tp_size() == 1) {
    gather_local(host);
    return;
  }
  const ParameterLayout& local = model_->trainable().layout();
  const ParameterLayout& full = model_->full_trainable_layout();
  const int64_t local_numel = local.group_numel(group);
  std::fill(host, host + full.group_numel(group), 0.0f);
  if (local_numel == 0) return;
  // Every tp rank's shard of the group (equal sizes), then each parameter's runs put back.
  std::vector<float> shards(static_cast<size_t>(local_numel * tp_size()));
  gather_local(shards.data() + mesh_->tp_index() * local_numel);
  const Tensor all(shards.data(), DType::f32, Shape{local_numel * tp_size()});
  mesh_->tp().all_gather(all.flat(mesh_->tp_index() * local_numel, local_numel), all);
  for (size_t p = 0; p < full.params().size(); ++p) {
    const ParameterInfo& fp = full.params()[p];
    if (fp.group != group) continue;
    const ParameterInfo& lp = local.params()[p];
    for (int t = 0; t < tp_size(); ++t) {
      const float* shard = shards.data() + t * local_numel + lp.offset;
      for (const TpRun& run : tp_runs(fp.shape, fp.split_dim, tp_size(), t))
        std::copy_n(shard + run.local, run.length, host + fp.offset + run.global);
    }
  }
}

void WeightIO::gather_local_gradients(int group, float* host) {
  const GroupShard& s = plan_->group(group);
  if (s.numel == 0) return;
  if (stage() <= 1) {
    model_->backend().copy_to_host(host, model_->trainable_gradients().group(group));
    return;
  }
  // Stages 2-3: each fsdp shard holds its part of the reduced gradient.
  if (shards_offloaded()) {
    gather_host_shards(group, offload_->gradient(group), host);
    return;
  }
  const Buffer gathered = zeroed_f32(model_->backend(), s.padded);
  const Tensor all = gathered.as(DType::f32, Shape{s.padded});
  mesh_->fsdp().all_gather(
      state_->group(group).grad_shard.as(DType::f32, Shape{s.shard}), all);
  model_->backend().copy_to_host(host, all.flat(0, s.numel));
}

void WeightIO::gather_host_shards(int group, const Tensor& shard, float* host) {
  const GroupShard& s = plan_->group(group);
  offload_->host().wait_all();
  const Buffer gathered = zeroed_f32(model_->backend(), s.padded);
  const Tensor all = gathered.as(DType::f32, Shape{s.padded});
  if (s.shard_length > 0)
    model_->backend().copy_from_host(all.flat(s.shard_begin, s.shard_length), shard.f32());
  mesh_->fsdp().all_gather(all.flat(s.shard_begin, s.shard), all);
  model_->backend().copy_to_host(host, all.flat(0, s.numel));
}

void WeightIO::gather_local_weights(int group, float* host) {
  const GroupShard& s = plan_->group(group);
  if (s.numel == 0) return;  // an empty group (LoRA's embedding and head groups)
  if (!sharded_masters()) {
    model_->backend().copy_to_host(host, model_->trainable().group(group));
    return;
  }
  if (shards_offloaded()) {
    gather_host_shards(group, offload_->master(group), host);
    return;
  }
  if (state_->sizing().gather_dtype != DType::f32) {
    // The slots hold the compute dtype: the f32 masters are gathered apart.
    const Buffer gathered = zeroed_f32(model_->backend(), s.padded);
    const Tensor all = gathered.as(DType::f32, Shape{s.padded});
    mesh_->fsdp().all_gather(
        state_->group(group).weight_shard.as(DType::f32, Shape{s.shard}), all);
    model_->backend().copy_to_host(host, all.flat(0, s.numel));
    return;
  }
  SlotPool& pool = gatherer_->pool(group);
  const int cached = pool.find(group);
  if (cached >= 0) {
    pool.wait(cached);
    model_->backend().copy_to_host(host, pool.tensor(cached, s.numel));
    return;
  }
  // Only the trainable part: a checkpoint never needs the frozen base gathered. The slot then
  // holds an incomplete group, so nothing may take it for a cached copy afterwards.
  const int slot = pool.take(group);
  gatherer_->start_gather(group, slot, false);
  pool.wait(slot);
  model_->backend().copy_to_host(host, pool.tensor(slot, s.numel));
  gatherer_->forget_cached();
}

void WeightIO::set_frozen_weights(int index, const float* values) {
  ANVIL_CHECK(frozen_plan_ != nullptr,
              "[parallel] set_frozen_weights on a model without a frozen base");
  const ParameterInfo& info = model_->parameters().layout().params()[static_cast<size_t>(index)];
  const float* local_values = values;
  std::vector<float> shard;
  if (tp_size() > 1) {
    // This tp rank's shard of the whole tensor, laid out as the shard parameter.
    const ParameterInfo& fp = model_->full_layout().params()[static_cast<size_t>(index)];
    shard.resize(static_cast<size_t>(info.numel()));
    for (const TpRun& run : tp_runs(fp.shape, fp.split_dim, tp_size(), mesh_->tp_index()))
      std::copy_n(values + run.global, run.length, shard.data() + run.local);
    local_values = shard.data();
  }
  if (stage() < 3) {
    model_->set_parameter(index, local_values);
    return;
  }
  const GroupShard& s = frozen_plan_->group(info.group);
  const int64_t first = std::max(info.offset, s.shard_begin);
  const int64_t last = std::min(info.offset + info.numel(), s.shard_begin + s.shard_length);
  if (first >= last) return;
  gatherer_->wait_all();
  write_f32_values(model_->backend(),
                   state_->frozen_shard_view(info.group, model_->parameters().dtype())
                       .flat(first - s.shard_begin, last - first),
                   local_values + (first - info.offset));
  gatherer_->forget_cached();
}

}  // namespace anvil
