// libFuzzer target for the JSON Lines corpus reader of `anvil prepare` (one record per line, the
// text in a field). The input is one .jsonl file, read with bad records rejected and again
// with them skipped; compressed inputs are recognised by their magic bytes, so a fuzzed gzip,
// zstd or xz stream reaches the decompressors too. Records are bounded at kFuzzMaxRecordBytes,
// so a longer line (seed long_record.jsonl) is a bad record.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/corpus.h"
#include "fuzz_glue.h"

namespace {

void read_all(const std::string& path, bool skip_bad_records) {
  anvil::CorpusOptions options;
  options.skip_bad_records = skip_bad_records;
  options.max_record_bytes = anvil::fuzz::kFuzzMaxRecordBytes;
  anvil::CorpusReader reader({path}, options);
  anvil::Document doc;
  while (reader.next(doc)) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = anvil::fuzz::write_scratch("corpus.jsonl", data, size).string();
  anvil::fuzz::expect_error_or_success([&] { read_all(path, false); });
  anvil::fuzz::expect_error_or_success([&] { read_all(path, true); });
  return 0;
}
