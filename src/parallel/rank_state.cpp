// Allocation of a rank's buffers from its sizing list (see rank_state.h).
#include "parallel/rank_state.h"

#include <algorithm>
#include <utility>

namespace anvil {
namespace {

// Allocates `entry` on `backend`, zeroed (every size in the list is a whole number of
// 16-bit elements).
Buffer zeroed_buffer(Backend& backend, const RankBuffer& entry) {
  Buffer buffer(backend, entry.bytes, entry.category);
  if (entry.bytes > 0)
    backend.fill_zero(buffer.as(DType::u16, Shape{static_cast<int64_t>(entry.bytes / 2)}));
  return buffer;
}

}  // namespace

RankState::RankState(Backend& device, RankBuffers sizing, int groups, int frozen_groups)
    : sizing_(std::move(sizing)),
      groups_(static_cast<size_t>(groups)),
      frozen_shards_(static_cast<size_t>(frozen_groups)) {
  for (const RankBuffer& entry : sizing_.buffers) {
    if (entry.host) continue;  // allocate_host
    const auto k = static_cast<size_t>(entry.index);
    switch (entry.kind) {
      case RankBufferKind::replica:
        groups_[k].replica = zeroed_buffer(device, entry);
        break;
      case RankBufferKind::master_shard:
        groups_[k].weight_shard = zeroed_buffer(device, entry);
        break;
      case RankBufferKind::gradient_shard:
        groups_[k].grad_shard = zeroed_buffer(device, entry);
        break;
      case RankBufferKind::gradient_sum:
        groups_[k].grad_sum = zeroed_buffer(device, entry);
        break;
      case RankBufferKind::reduce_cast:
        groups_[k].reduce_cast = Buffer(device, entry.bytes, entry.category);
        break;
      case RankBufferKind::frozen_shard:
        frozen_shards_[k] = zeroed_buffer(device, entry);
        break;
      case RankBufferKind::weight_slots:
        weight_pools_[k] = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::gradient_slots:
        gradient_pools_[k] = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::scatter_scratch:
        scatter_scratch_[k] = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::shard_staging:
        shard_staging_[k] = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::running_sum_slot:
        running_sum_slot_ = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::running_sum_source:
        running_sum_source_ = SlotPool(device, entry.count, entry.bytes);
        break;
      case RankBufferKind::step_results:
        step_results_ = Buffer(device, entry.bytes, entry.category);
        break;
      case RankBufferKind::optimizer_moments:  // the optimizer's own
      case RankBufferKind::host_master:
      case RankBufferKind::host_gradient:
      case RankBufferKind::host_cast_staging:
        break;
    }
  }
}

Tensor RankState::weight_shard_view(int g, DType dtype, size_t byte_offset,
                                    int64_t elements) const {
  const Buffer& buffer = group(g).weight_shard;
  return Tensor(static_cast<char*>(buffer.data()) + byte_offset, dtype, Shape{elements},
                buffer.device());
}

Tensor RankState::frozen_shard_view(int g, DType dtype) const {
  const Buffer& buffer = frozen_shard(g);
  return buffer.as(dtype, Shape{static_cast<int64_t>(buffer.bytes() / dtype_size(dtype))});
}

void RankState::allocate_host(Backend& host) {
  // With offload_params the weight shards the gathers read (cast into from the master after
  // each update); else, for 16-bit gathers, the buffer a master shard is cast in.
  for (const RankBuffer& entry : sizing_.buffers) {
    if (!entry.host) continue;
    if (entry.kind == RankBufferKind::master_shard) {
      Buffer& shard = groups_[static_cast<size_t>(entry.index)].weight_shard;
      shard = Buffer(host, entry.bytes, entry.category);
      std::fill_n(static_cast<char*>(shard.data()), entry.bytes, 0);
    } else if (entry.kind == RankBufferKind::host_cast_staging) {
      host_cast_staging_ = Buffer(host, entry.bytes, entry.category);
    }
  }
}

void RankState::release_host() {
  for (const RankBuffer& entry : sizing_.buffers) {
    if (entry.host && entry.kind == RankBufferKind::master_shard)
      groups_[static_cast<size_t>(entry.index)].weight_shard = Buffer();
  }
  host_cast_staging_ = Buffer();
}

}  // namespace anvil
