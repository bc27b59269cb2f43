// libFuzzer target for SFT JSON Lines records (`anvil prepare --sft`): chat or alpaca form,
// one record per line; every line is classified as valid or bad, and reading only throws for
// an unreadable file (or a damaged compressed stream). Records are bounded at
// kFuzzMaxRecordBytes, so a longer line (seed long_record.jsonl) is a bad record.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/sft_records.h"
#include "fuzz_glue.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_scratch("chat.jsonl", data, size).string();
  anvil::fuzz::expect_error_or_success([&] {
    anvil::read_sft_records(path, false, nullptr, anvil::fuzz::kFuzzMaxRecordBytes);
  });
  anvil::fuzz::expect_error_or_success([&] {
    uint64_t skipped = 0;
    anvil::read_sft_records(path, true, &skipped, anvil::fuzz::kFuzzMaxRecordBytes);
  });
  return 0;
}
