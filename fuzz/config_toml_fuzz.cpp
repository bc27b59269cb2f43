// libFuzzer target for TOML training configs (`anvil train --config FILE`): parsing and
// assigning every key into a TrainConfig.
#include <cstddef>
#include <cstdint>

#include "fuzz_glue.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success([&] {
    anvil::TrainConfig config;
    anvil::apply_config_toml(config, anvil::fuzz::as_text(data, size), "fuzz.toml");
    anvil::config_to_toml(config);
  });
  return 0;
}
