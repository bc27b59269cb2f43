// Building the model and optimizer a run trains: the LlamaConfig the [model] section
// describes, and AdamW groups over the model's flat parameter groups with weight-decay spans
// taken from the parameter layout (padding between parameters joins the span before it; it
// is zero and has zero gradient, so the update leaves it zero).
#pragma once

#include <vector>

#include "model/llama.h"
#include "optim/adamw.h"
#include "train/config.h"

namespace anvil {

// Returns the architecture the [model] section describes (not yet validated).
LlamaConfig llama_config_from(const ModelConfigSection& model);

// Returns one optimizer group per parameter group of `model`, with merged decay spans.
std::vector<OptimizerGroup> optimizer_groups_for(LlamaModel& model);

// Returns the AdamW hyper-parameters of the [optimizer] section.
AdamWHyperParams adamw_hyper_params_from(const OptimizerConfigSection& optimizer);

}  // namespace anvil
