// What an allocation is for. Every allocation a backend makes is counted under one category,
// current and peak per rank (issue: measured memory by category), and `anvil plan` predicts
// per-device bytes under the same categories, so a prediction and a measurement compare
// category by category. The names are the keys in sharding.json, metrics.jsonl
// ("mem_peak": {"<name>": bytes, ...}), the trace's memory counter and `anvil plan --json`.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace anvil {

enum class MemoryCategory : int {
  frozen_weights,     // the frozen base of LoRA fine-tuning (its shard under ZeRO-3)
  trainable_weights,  // f32 trainable weights or master shards
  gradients,          // f32 gradients, their shards and running sums
  optimizer_state,    // AdamW's m and v
  activations,        // what the forward pass keeps for the backward pass
  communication,      // gather / reduce slots and staging for collectives
  workspace,          // everything else: compute-dtype weight copies, scratch, logits
};

inline constexpr int kMemoryCategoryCount = 7;

inline constexpr std::array<std::string_view, kMemoryCategoryCount> kMemoryCategoryNames = {
    "frozen_weights", "trainable_weights", "gradients", "optimizer_state",
    "activations",    "communication",     "workspace"};

inline constexpr std::string_view memory_category_name(MemoryCategory category) {
  return kMemoryCategoryNames[static_cast<int>(category)];
}

// Bytes by category, indexed by static_cast<int>(MemoryCategory).
using MemoryByCategory = std::array<int64_t, kMemoryCategoryCount>;

}  // namespace anvil
