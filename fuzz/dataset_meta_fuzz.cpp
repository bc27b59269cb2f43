// libFuzzer target for a prepared dataset's meta.json as `anvil generate` and `anvil eval` read
// it to find the run's tokenizer.
#include <cstddef>
#include <cstdint>

#include "data/dataset_meta.h"
#include "fuzz_glue.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::expect_error_or_success(
      [&] { anvil::meta_tokenizer_path(anvil::fuzz::as_text(data, size), "fuzz/meta.json"); });
  return 0;
}
