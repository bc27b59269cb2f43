// libFuzzer target for the Hugging Face config.json reader (`anvil convert`, `--from HF_DIR`).
#include <cstddef>
#include <cstdint>

#include "fuzz_glue.h"
#include "model/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success(
      [&] { anvil::parse_hf_config(anvil::fuzz::as_text(data, size), "fuzz/config.json"); });
  return 0;
}
