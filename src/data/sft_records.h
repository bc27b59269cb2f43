// SFT JSONL records: one JSON object per line, in chat form
// ({"messages": [{"role": "system"|"user"|"assistant", "content": "..."}]}) or alpaca form
// ({"instruction", "input", "output", optional "system"}). Alpaca maps to an optional system
// message, a user turn (instruction, plus "\n\n" + input when input is non-empty) and an
// assistant turn. Blank lines are skipped. A record is valid when it parses, every role is
// known, and it has at least one assistant turn, none of them with empty content. Files are
// read through LineReader (line_reader.h): gzip, zstd and xz are found by their magic bytes, a
// line longer than the record bound is a bad record that is never held in memory, and a JSON
// array file is refused with how to convert it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/chat_template.h"
#include "data/line_reader.h"

namespace anvil {

struct SftRecord {
  std::vector<ChatMessage> messages;
  std::string file;
  uint64_t line = 0;  // 1-based line number in `file`
};

// Parses one JSONL line into messages; throws anvil::Error "[sft] reason" (e.g. "invalid JSON:
// ...", "message 2: unknown role \"bot\" ...", "no assistant turn").
std::vector<ChatMessage> parse_sft_record(std::string_view line);

struct SftBadRecord {
  uint64_t line = 0;   // 1-based line number
  std::string reason;  // without the "[sft] " prefix
};

struct SftFileRecords {
  std::vector<SftRecord> records;  // valid records in line order
  std::vector<SftBadRecord> bad;   // invalid records in line order
};

// Reads the records of one JSONL file one at a time, so memory holds one record, not the file.
class SftRecordReader {
 public:
  enum class Next { record, bad, end };
  // Opens `path`; throws "[sft] ..." when it cannot be opened or holds a JSON array.
  SftRecordReader(const std::string& path, uint64_t max_record_bytes);
  // Reads the next non-blank line into `record` (record) or `bad` (bad); end at the end of the
  // file. Throws "[sft] file:line: ..." when the stream is damaged (a corrupt or truncated
  // compressed file).
  Next next(SftRecord& record, SftBadRecord& bad);

 private:
  LineReader lines_;
  std::string line_;
};

// Reads every non-blank line of a JSONL file into valid and bad records; throws only when the
// file cannot be read.
SftFileRecords read_sft_file(const std::string& path,
                             uint64_t max_record_bytes = kDefaultMaxRecordBytes);

// Reads every record of a JSONL file. A bad record throws "[sft] file:line: reason" unless
// skip_bad_records, in which case it is warned about (same text) and counted in *skipped.
std::vector<SftRecord> read_sft_records(const std::string& path, bool skip_bad_records,
                                        uint64_t* skipped,
                                        uint64_t max_record_bytes = kDefaultMaxRecordBytes);

}  // namespace anvil
