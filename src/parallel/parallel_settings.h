// The [parallel] settings: declared once here, read by the configuration as its [parallel]
// section (train/config_fields.cpp lists the keys), checked once by validate_parallel_settings
// (naming the key at fault) and handed as they are to the mesh, the engine and the planner.
// The fields hold what the user wrote (integers as int64_t, choices as their names), as the
// configuration reads every section; the accessors give the typed values the engine uses.
// Adding a key: a field here, its check in validate_parallel_settings, a row in
// config_fields.cpp and docs/training.md, and the part of the engine that reads it.
#pragma once

#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace anvil {

// How the engine reduces gradients (docs/distributed.md section 5). exact: ordered sums after
// every micro-step, bitwise equal to one process at any mesh. fast: the library's own
// all-reduce (stages 0-1, once per step) or reduce-scatter (stages 2-3, once per micro-step),
// optionally in bf16; repeatable on a fixed mesh, not equal across meshes.
enum class ReduceMode { exact, fast };

// dp x fsdp x tp x cp = the job's ranks; 0 for dp or fsdp derives it (docs/distributed.md).
struct ParallelSettings {
  int64_t dp = 0;
  int64_t fsdp = 0;
  int64_t tp = 1;
  int64_t cp = 1;  // context parallelism: each sequence cut over cp ranks (ring attention)
  bool sequence_parallel = false;  // split the residual stream over the tp ranks (tp > 1)
  int64_t zero_stage = 0;  // 0 replicate, 1 shard optimizer state, 2 + gradients, 3 + weights
  bool offload = false;    // AdamW state and f32 masters in host memory (offloaded_optimizer.h)
  // Stage 3 with offload (DeepSpeed's offload_param): the weight shard the gathers read lives
  // in host memory too; each gather first uploads this rank's part into its place in the slot.
  bool offload_params = false;
  int64_t prefetch = 1;  // ZeRO-3: groups gathered ahead of the one in use
  // ZeRO-3 (FSDP2's reshard_after_forward): true frees each layer's gathered weights after its
  // forward and gathers them again for backward; false keeps every layer gathered from its
  // forward to the end of the step (one slot per layer; backward and later micro-batches
  // gather nothing).
  bool reshard_after_forward = true;
  // Overlap collectives with compute (stage-3 prefetch, reductions in flight during backward);
  // false makes every collective complete where it starts (for measuring what overlap hides).
  bool overlap = true;
  // Seconds a rank may wait inside one collective before the watchdog ends it (0: off).
  double collective_timeout_s = 600.0;
  // Gradient reductions: "exact" or "fast" (ReduceMode), in reduce_dtype "f32" or (fast only)
  // "bf16".
  std::string reduce = "exact";
  std::string reduce_dtype = "f32";

  // Returns `reduce` as the engine takes it (valid settings only).
  ReduceMode reduce_mode() const;
  // Returns `reduce_dtype` as a dtype (valid settings only).
  DType reduce_type() const;
};

// Throws "[config] parallel.<key> ..." for the first setting out of range or in conflict with
// another [parallel] setting. Checks that need the world size are resolve_mesh_shape's.
void validate_parallel_settings(const ParallelSettings& settings);

}  // namespace anvil
