// libFuzzer target for MMLU task files in CSV layout (`anvil eval --task mmlu`): the input is
// one subject's test file and, for the 5-shot prompt, its dev file.
#include <cstddef>
#include <cstdint>

#include "eval/tasks.h"
#include "fuzz_glue.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  anvil::fuzz::write_scratch("mmlu/test/anatomy_test.csv", data, size);
  anvil::fuzz::write_scratch("mmlu/dev/anatomy_dev.csv", data, size);
  anvil::TaskLoadOptions options;
  options.task = "mmlu";
  options.data = anvil::fuzz::scratch_dir() / "mmlu";
  options.max_record_bytes = anvil::fuzz::kFuzzMaxRecordBytes;
  anvil::fuzz::expect_error_or_success([&] { anvil::load_task(options); });
  return 0;
}
