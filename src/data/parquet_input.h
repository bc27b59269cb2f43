// Parquet input for `anvil prepare`: the text column of a `.parquet` file (the layout Hugging
// Face datasets ship), read with Apache Arrow's C++ Parquet reader. A file is Parquet when it
// starts with the magic bytes "PAR1", whatever its name. A row group is read in batches of
// kParquetBatchRows rows, page by page (a buffered stream, no pre-buffered column chunks), so
// memory is bounded by a batch and a page, not by the row group: pyarrow's write_table puts up
// to 1Mi rows in a group, a whole file for most. Arrow is an optional part of the build
// (pyarrow's wheel supplies it; see scripts/install-deps.sh): without it, opening a Parquet
// file is one error line naming what is missing.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace anvil {

// Returns true when this build can read Parquet files.
bool parquet_supported();
// Returns true when the file at `path` starts with "PAR1"; throws when it cannot be opened.
bool is_parquet_file(const std::string& path);

inline constexpr int64_t kParquetBatchRows = 512;

// One batch of a row group's text column: `texts[r]` is row r's text, `present[r]` is 0 for a
// null.
struct ParquetRows {
  std::vector<std::string> texts;
  std::vector<uint8_t> present;
};

class ParquetTextReader {
 public:
  // Opens `path` and finds the string column `text_field`; throws "[prepare] PATH: ..." for a
  // corrupt file, a missing column (naming the columns there are) or a non-string column.
  ParquetTextReader(const std::string& path, const std::string& text_field);
  ~ParquetTextReader();
  ParquetTextReader(const ParquetTextReader&) = delete;
  ParquetTextReader& operator=(const ParquetTextReader&) = delete;

  int row_groups() const;
  // Returns the rows of row group `group`.
  int64_t rows_in_group(int group) const;
  // Returns the compressed bytes of row group `group` (its share of the file, for progress).
  uint64_t group_bytes(int group) const;
  // Starts reading row group `group`.
  void open_group(int group);
  // Reads the next batch of the open row group's text column into `rows`; returns false (and
  // clears `rows`) at the group's end.
  bool next_batch(ParquetRows& rows);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace anvil
