// libFuzzer target for `--section.key=value` command-line overrides: the input is an argument
// list, one argument per line, split into overrides as the CLI does and applied in order.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_glue.h"
#include "train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::vector<std::string> args;
  std::string_view text = anvil::fuzz::as_text(data, size);
  while (!text.empty()) {
    const size_t end = text.find('\n');
    args.emplace_back(text.substr(0, end));
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  anvil::fuzz::expect_error_or_success([&] {
    anvil::TrainConfig config;
    for (const anvil::ConfigOverride& override_arg : anvil::extract_config_overrides(args))
      anvil::apply_config_override(config, override_arg.name, override_arg.value);
    anvil::config_to_toml(config);
  });
  return 0;
}
