// Building the model and optimizer a run trains: the LlamaConfig the [model] section
// describes, the model options and mesh settings of the whole config, the attention masks of
// [attention] and the AdamW hyper-parameters of the [optimizer] section. The AdamW groups
// themselves (one per parameter group, or per shard of one) are built by the parallel
// engine from the layout's decay spans (parallel/shard_plan.h).
#pragma once

#include "model/llama.h"
#include "optim/adamw.h"
#include "parallel/mesh.h"
#include "train/config.h"

namespace anvil {

// Returns the model options a run of `config` builds its model with, before the parallel
// engine applies its mesh (DataParallelEngine::model_options): batch capacity for training
// and evaluation, this rank's rows of a sequence (seq_len / cp), dtype, checkpointing, masks,
// LoRA and the frozen base's dtype. `anvil train` and `anvil plan` both use it.
ModelOptions model_options_from(const TrainConfig& config);

// Returns the architecture the [model] section describes (not yet validated).
LlamaConfig llama_config_from(const ModelConfigSection& model);

// Returns the [model] section that describes `config` (the inverse of llama_config_from;
// init_from is left empty).
ModelConfigSection model_section_from(const LlamaConfig& config);

// Returns the per-layer attention masks the [attention] section describes (validated).
AttentionSchedule attention_schedule_from(const AttentionConfigSection& attention);

// Returns the AdamW hyper-parameters of the [optimizer] section.
AdamWHyperParams adamw_hyper_params_from(const OptimizerConfigSection& optimizer);

}  // namespace anvil
