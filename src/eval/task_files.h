// Readers of benchmark task files: JSON Lines (one object per line, Hugging Face field names)
// and the original MMLU CSV files (no header; question, A, B, C, D, answer letter). Every
// record keeps its file and line so a bad value is reported where it is. Either kind may be
// gzip, zstd or xz compressed (found by its magic bytes); a line longer than the bound (256
// MiB unless told) is an error, and a JSON array file is refused with how to convert it.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/line_reader.h"

namespace anvil {

struct TaskRecord {
  nlohmann::json fields;
  std::filesystem::path file;
  int64_t line = 0;  // 1-based line where the record starts

  // Returns "FILE:LINE" for messages.
  std::string where() const;
  // Returns field `key` as a string; throws naming the file and line if it is missing or not
  // a string.
  std::string text(const char* key) const;
  // Returns field `key`, which must exist.
  const nlohmann::json& field(const char* key) const;
  // Returns field `key` as an index in [0, count): an integer, a string of digits, or (with
  // `letters`) a letter from 'A'. Throws otherwise.
  int index(const char* key, int count, bool letters = false) const;
  // Returns field `key` as a list of strings.
  std::vector<std::string> texts(const char* key) const;
};

// Reads a JSON Lines file (blank lines skipped); `limit` > 0 stops after that many records.
std::vector<TaskRecord> read_json_lines(const std::filesystem::path& file, int64_t limit = 0,
                                        uint64_t max_record_bytes = kDefaultMaxRecordBytes);

// Reads an MMLU CSV file into records {"question", "choices": [4], "answer": 0..3}.
std::vector<TaskRecord> read_mmlu_csv(const std::filesystem::path& file, int64_t limit = 0,
                                      uint64_t max_record_bytes = kDefaultMaxRecordBytes);

}  // namespace anvil
