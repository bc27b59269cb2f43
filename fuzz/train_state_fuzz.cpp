// libFuzzer target for a checkpoint's train_state.json (steps, tokens, loss scale, data cursor),
// read on every resume.
#include <cstddef>
#include <cstdint>

#include "fuzz_glue.h"
#include "train/train_state.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success([&] {
    anvil::parse_train_state(anvil::fuzz::as_text(data, size), "fuzz/train_state.json");
  });
  return 0;
}
