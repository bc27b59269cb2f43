// Corpus input for `anvil prepare`: turns --input arguments into an ordered file list and the
// files into a stream of text documents. The order is fixed by the arguments and, inside a
// folder, by byte-wise sorted paths, so the same inputs always give the same document indices.
// Folder walks skip hidden entries, files that look binary (a NUL byte in the first 8 KiB,
// e.g. the strfile `*.dat` indexes next to Debian fortunes) and second paths to an already
// listed file (symlinks such as fortunes' `*.u8`). Explicitly named files are never skipped:
// a binary one is an error. Kinds: `.jsonl`/`.ndjson` files hold one JSON record per line;
// every other file is text, one document per file or one per piece between separator lines.
// Any file may be compressed with gzip, zstd or xz (compressed_input.h: found by its magic
// bytes and streamed); its kind is named without the compression suffix ("web.jsonl.zst" is
// JSON Lines), and a compressed `.json` file is JSON Lines too (Dolma ships `.json.gz`).
// Folder walks do not skip compressed files as binary.
#pragma once

#include <cstdint>
#include <istream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/compressed_input.h"

namespace anvil {

struct ResolvedInputs {
  std::vector<std::string> files;           // in document order
  std::vector<std::string> skipped_binary;  // skipped during folder walks
  std::vector<std::string> skipped_duplicates;
};

// Resolves files, folders (walked recursively) and glob patterns; throws for a missing path,
// a pattern without matches, or an explicitly named binary file.
ResolvedInputs resolve_inputs(const std::vector<std::string>& inputs);

// Returns true for the files read as JSON Lines: .jsonl and .ndjson, compressed or not, and
// compressed .json (".json.gz").
bool is_jsonl_path(const std::string& path);

struct CorpusOptions {
  std::string text_field = "text";
  std::optional<std::string> doc_separator;  // a line equal to this splits text files
  bool skip_bad_records = false;             // --on-error skip: warn and go on
};

struct Document {
  std::string text;
  size_t file = 0;    // index into the reader's file list
  uint64_t line = 0;  // 1-based line where the document starts (1 for whole files)
};

class CorpusReader {
 public:
  CorpusReader(std::vector<std::string> files, CorpusOptions options);

  // Reads the next non-blank document into `doc`; returns false at the end of the corpus.
  // Throws "[prepare] file:line: ..." for a bad JSONL record unless skip_bad_records is set.
  bool next(Document& doc);

  const std::vector<std::string>& files() const { return files_; }
  // Returns the (decompressed) bytes consumed from the input files so far.
  uint64_t bytes_read() const { return bytes_read_; }
  // Returns the JSONL records skipped as invalid (only with skip_bad_records).
  uint64_t skipped_records() const { return skipped_records_; }
  // Returns the documents dropped because they were empty or only whitespace.
  uint64_t blank_documents() const { return blank_documents_; }
  // Returns how many documents each file produced, in file order.
  const std::vector<uint64_t>& documents_per_file() const { return documents_per_file_; }

 private:
  bool open_next_file();
  bool read_line(std::string& line);
  bool next_jsonl(Document& doc);
  bool next_separated(Document& doc);
  bool next_whole_file(Document& doc);
  void reject_record(const std::string& reason);
  // Throws "[prepare] file:line: ..." when the current file's decompression failed.
  void check_stream() const;

  std::vector<std::string> files_;
  CorpusOptions options_;
  size_t next_file_ = 0;
  size_t current_ = 0;
  bool file_open_ = false;
  std::unique_ptr<DecompressingBuffer> buffer_;
  std::istream stream_{nullptr};
  uint64_t line_number_ = 0;
  uint64_t bytes_read_ = 0;
  uint64_t skipped_records_ = 0;
  uint64_t blank_documents_ = 0;
  std::vector<uint64_t> documents_per_file_;
};

}  // namespace anvil
