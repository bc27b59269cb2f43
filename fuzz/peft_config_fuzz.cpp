// libFuzzer target for a PEFT adapter_config.json (`anvil finetune --resume`, `anvil generate
// --adapter`, `anvil export`).
#include <cstddef>
#include <cstdint>

#include "fuzz_glue.h"
#include "model/peft_adapter.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success([&] {
    anvil::parse_peft_adapter_config(anvil::fuzz::as_text(data, size), "fuzz/adapter_config.json");
  });
  return 0;
}
