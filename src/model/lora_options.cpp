// LoRA settings that do not touch tensors: the target module names and option checks. Kept
// apart from lora.cpp so that config readers (PEFT adapter_config.json) need no backend.
#include <algorithm>
#include <cmath>
#include <set>

#include "core/error.h"
#include "model/lora.h"
#include "model/parameter_table.h"

namespace anvil {

const std::array<std::string, kLoraTargetCount>& lora_target_names() {
  static const std::array<std::string, kLoraTargetCount> names = [] {
    std::array<std::string, kLoraTargetCount> list;
    std::copy(lora_module_names().begin(), lora_module_names().end(), list.begin());
    return list;
  }();
  return names;
}

LoraTarget parse_lora_target(const std::string& name) {
  const ParamRow& row = lora_target_row(name);
  const std::vector<const ParamRow*>& rows = lora_target_rows();
  const auto position = std::find(rows.begin(), rows.end(), &row) - rows.begin();
  return static_cast<LoraTarget>(position);
}

void validate_lora_options(const LoraOptions& options) {
  ANVIL_CHECK(options.r >= 1, "[lora] r must be at least 1, got {}", options.r);
  ANVIL_CHECK(options.alpha > 0.0f && std::isfinite(options.alpha),
              "[lora] alpha must be positive, got {}", options.alpha);
  ANVIL_CHECK(options.dropout >= 0.0f && options.dropout < 1.0f,
              "[lora] dropout must lie in [0, 1), got {}", options.dropout);
  ANVIL_CHECK(!options.targets.empty(), "[lora] no target modules given");
  std::set<std::string> seen;
  for (const std::string& target : options.targets) {
    parse_lora_target(target);
    ANVIL_CHECK(seen.insert(target).second, "[lora] target '{}' listed twice", target);
  }
}

}  // namespace anvil
