// libFuzzer target for the JSON Lines benchmark task files of `anvil eval` (hellaswag, ARC,
// PIQA, WinoGrande, BoolQ): reading the records and building every question's choices. The
// first input byte picks the task, the rest is the file.
#include <array>
#include <cstddef>
#include <cstdint>

#include "eval/tasks.h"
#include "fuzz_glue.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  static const std::array<const char*, 5> tasks = {"hellaswag", "arc_easy", "piqa", "winogrande",
                                                   "boolq"};
  anvil::TaskLoadOptions options;
  options.task = tasks[data[0] % tasks.size()];
  options.data = anvil::fuzz::write_scratch("task.jsonl", data + 1, size - 1);
  options.max_record_bytes = anvil::fuzz::kFuzzMaxRecordBytes;
  anvil::fuzz::expect_error_or_success([&] { anvil::load_task(options); });
  return 0;
}
