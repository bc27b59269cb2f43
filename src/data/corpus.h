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
// JSON Lines), and a compressed `.json` file is JSON Lines too (Dolma ships `.json.gz`). A
// file that starts with "PAR1" is Parquet (parquet_input.h): each row's --text-field column is
// a document, and a null there is a bad record. Folder walks do not skip compressed or Parquet
// files as binary.
//
// Every line-oriented file is read through LineReader (line_reader.h), bounded by
// max_record_bytes: a longer JSON Lines record is a bad record (an error, or skipped and
// counted under --on-error skip) and is never held in memory. A text document longer than the
// bound is read in pieces of at most the bound, each cut after the last whitespace byte
// inside it and prepared as a document of its own (docs/data.md says why); a piece with no
// whitespace at all is a bad record. A JSON Lines (or .json) file holding a JSON array is
// refused with how to convert it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "data/compressed_input.h"
#include "data/input_pieces.h"
#include "data/line_reader.h"
#include "data/parquet_input.h"

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

inline constexpr uint64_t kDefaultPieceBytes = uint64_t{64} << 20;

struct CorpusOptions {
  std::string text_field = "text";
  std::optional<std::string> doc_separator;  // a line equal to this splits text files
  bool skip_bad_records = false;             // --on-error skip: warn and go on
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // --max-record-bytes
};

struct Document {
  std::string text;
  size_t file = 0;        // index into the reader's file list
  size_t piece = 0;       // index into the reader's piece list
  uint64_t line = 0;      // 1-based line inside its piece (1 for whole files)
};

class CorpusReader {
 public:
  // Reads `pieces` (input_pieces.h) of `files` in order.
  CorpusReader(std::vector<std::string> files, std::vector<InputPiece> pieces,
               CorpusOptions options);
  // Reads all of `files` (plan_pieces with the default range size).
  CorpusReader(std::vector<std::string> files, CorpusOptions options);
  ~CorpusReader();

  // Reads the next non-blank document into `doc`; returns false at the end of the pieces.
  // Throws "[prepare] file:line: ..." for a bad JSONL record unless skip_bad_records is set.
  bool next(Document& doc);
  // Returns "file:line" (or "file: row N" for Parquet) of a document read before.
  std::string location(const Document& doc);

  const std::vector<std::string>& files() const { return files_; }
  // Returns the (decompressed) bytes consumed from the input files so far.
  uint64_t bytes_read() const { return bytes_read_; }
  // Returns how far through the pieces' on-disk bytes (InputPiece::bytes) reading has come.
  uint64_t progress_bytes() const;
  // Returns the JSONL records skipped as invalid (only with skip_bad_records).
  uint64_t skipped_records() const { return skipped_records_; }
  // Returns the documents dropped because they were empty or only whitespace.
  uint64_t blank_documents() const { return blank_documents_; }
  // Returns how many documents each file produced, in file order.
  const std::vector<uint64_t>& documents_per_file() const { return documents_per_file_; }

 private:
  bool open_next_piece();
  void close_piece();
  bool next_jsonl(Document& doc);
  bool next_text(Document& doc);
  bool next_parquet(Document& doc);
  // Handles a separator line of a text piece; returns false when it ends the piece (a range's
  // first separator at or past its end).
  bool at_separator();
  // Moves the current text document (or, when it is longer than the bound, its first piece)
  // into `doc`; returns false when that was blank or a bad record instead.
  bool take_text(Document& doc, bool document_ended);
  void reject_record(const std::string& reason);
  // Returns the file line where piece `p` starts (counted once, when an error needs it).
  uint64_t first_line_of_piece(size_t p);
  std::string current_location();
  // Throws "[prepare] file:line: ..." when the current file's decompression failed.
  void check_stream();
  // Returns the line number inside the current piece of the line being read.
  uint64_t piece_line() const;

  std::vector<std::string> files_;
  std::vector<InputPiece> pieces_;
  CorpusOptions options_;
  size_t next_piece_ = 0;
  size_t current_ = 0;  // piece being read
  bool piece_open_ = false;
  std::unique_ptr<LineReader> lines_;
  uint64_t lines_before_piece_ = 0;  // lines_->lines() at the piece's first line
  std::unique_ptr<ParquetTextReader> parquet_;
  size_t parquet_file_ = SIZE_MAX;  // file parquet_ has open
  ParquetRows rows_;               // the current batch of the open row group
  size_t next_row_ = 0;            // in rows_
  uint64_t rows_before_batch_ = 0;  // rows of the group read before rows_
  uint64_t line_number_ = 0;   // Parquet: rows read in the current group; text: documents
  // The current text document: its bytes so far, its first line, whether the next read starts
  // a line, whether this piece owns the document (a range owns those after its first
  // separator), and whether the piece has ended.
  std::string text_;
  uint64_t text_first_line_ = 0;
  bool at_line_start_ = true;
  bool owning_ = true;
  bool piece_ended_ = false;
  uint64_t owned_from_ = 0;  // file offset where the piece's own bytes start
  uint64_t owned_to_ = 0;    // and end (set when the piece ends)
  std::vector<uint64_t> first_lines_;    // per piece: file line of its first line, 0 until counted
  std::vector<uint64_t> first_offsets_;  // per piece: file offset of its first line
  uint64_t bytes_read_ = 0;
  uint64_t pieces_done_bytes_ = 0;
  uint64_t skipped_records_ = 0;
  uint64_t blank_documents_ = 0;
  std::vector<uint64_t> documents_per_file_;
};

}  // namespace anvil
