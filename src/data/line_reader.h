// LineReader: the one reader of line-oriented input (prepare's text and JSON Lines, SFT records,
// eval task files, `anvil tokenize --input`). It reads through DecompressingBuffer, so gzip, zstd
// and xz are found by their magic bytes wherever a line-oriented file is read, and it bounds a
// line before anything is allocated for it: a line longer than the bound is never held, the
// reader skips to the next newline scanning the decompressed bytes in place, so memory stays
// at the bound (plus the decoder's fixed buffers) whatever the input holds. Callers decide what
// a too-long line is (an error, a skipped record, or text read in parts with next_part).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "data/compressed_input.h"

namespace anvil {

// The default of --max-record-bytes: far above any real record (a book is a few MiB), far
// below what takes a machine down.
inline constexpr uint64_t kDefaultMaxRecordBytes = uint64_t{256} << 20;
// The largest bound accepted (2^62 bytes): far past any memory, and sums with it cannot wrap.
inline constexpr uint64_t kLargestRecordBound = uint64_t{1} << 62;

// Returns "268435456 bytes (256 MiB)": the bound as messages state it.
std::string describe_record_bound(uint64_t max_record_bytes);

// Returns the one-line refusal of a JSON array file ("[{...}, ...]", what
// datasets.Dataset.to_json(lines=False) writes), with how to convert it to JSON Lines.
std::string json_array_refusal(const std::string& path);

class LineReader {
 public:
  enum class Read { line, too_long, end };
  enum class Part { more, line_end, input_end };

  // Opens `path` (compressed or not) at decompressed byte `start` (past 0 for uncompressed
  // files only); lines longer than `max_line_bytes` (not counting the '\n') are too long.
  LineReader(const std::string& path, uint64_t max_line_bytes, uint64_t start = 0);

  // Reads the next line without its '\n' into `line`. A too-long line is not kept: `line` is
  // left empty and the reader has moved past its newline. Returns end at the end of input or
  // on a stream error (see error()).
  Read next(std::string& line);
  // Appends at most `max` more bytes of the current line to `out`: line_end when the line ended
  // there (its '\n' consumed, not appended; or the input ended), more when it goes on,
  // input_end when no line was left to start.
  Part next_part(std::string& out, size_t max);
  // Consumes the rest of the current line and its '\n' without keeping it.
  void skip_rest_of_line();
  // Returns true when the first non-blank byte of the input (after a UTF-8 BOM) is '[': a JSON
  // array, not JSON Lines. Reads nothing away; call it before the first line.
  bool starts_with_json_array();

  const std::string& path() const { return path_; }
  uint64_t max_line_bytes() const { return max_line_bytes_; }
  // Returns the lines begun so far (the current line's 1-based number inside what was read).
  uint64_t lines() const { return lines_; }
  // Returns the decompressed byte offset in the file where the current line starts.
  uint64_t line_offset() const { return line_offset_; }
  // Returns the decompressed byte offset of the next unread byte.
  uint64_t offset() const { return offset_; }
  // Returns whether the last line that ended did so with a '\n' (not the end of input).
  bool ended_with_newline() const { return ended_with_newline_; }
  Compression compression() const { return buffer_.compression(); }
  // Returns the file bytes read so far (compressed bytes for compressed files).
  uint64_t file_bytes_read() const { return buffer_.file_bytes_read(); }
  // Returns "" or what went wrong in the stream (compressed_input.h).
  const std::string& error() const { return buffer_.error(); }
  // Returns "byte N" or, for a compressed file, "byte N of the decompressed stream".
  std::string describe_offset(uint64_t offset) const;

 private:
  void begin_line();

  std::string path_;
  DecompressingBuffer buffer_;
  uint64_t max_line_bytes_;
  uint64_t lines_ = 0;
  uint64_t line_offset_ = 0;
  uint64_t offset_ = 0;
  bool in_line_ = false;
  bool ended_with_newline_ = false;
};

}  // namespace anvil
