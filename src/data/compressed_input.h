// Reading an input file whatever it was compressed with: gzip (zlib), zstd (libzstd) or xz
// (liblzma), recognised by the magic bytes at the start of the file, not by its name, and
// streamed (never decompressed to disk or whole into memory). A file without a known magic is
// read as it is. Concatenated streams (`cat a.gz b.gz`, pigz and zstd's multi-frame output)
// read as one. A corrupt stream, or one that ends before its end marker (a truncated
// download), is an error naming the file and the compressed byte offset; the reader never
// passes off a damaged stream's prefix as the whole file.
#pragma once

#include <cstdint>
#include <fstream>
#include <memory>
#include <streambuf>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

enum class Compression { none, gzip, zstd, xz };

// Returns the compression of the file starting with these bytes (at least 6 of them when the
// file is that long).
Compression detect_compression(const char* head, size_t size);
// Returns the compression of the file at `path`; throws "[data] PATH: cannot open: ...".
Compression detect_compression(const std::string& path);
// Returns "gzip", "zstd", "xz" or "none".
const char* compression_name(Compression compression);
// Returns `path` without a compression suffix (.gz, .zst, .zstd, .xz): what the content is
// named as ("web.jsonl.zst" -> "web.jsonl").
std::string strip_compression_suffix(const std::string& path);

// A read-only stream buffer over the decompressed bytes of one file.
class DecompressingBuffer final : public std::streambuf {
 public:
  // Opens `path` and reads its first bytes to choose the decoder; throws when it cannot open.
  // A `start` past 0 reads an uncompressed file from that byte on (a compressed stream cannot
  // be entered in the middle: that throws).
  explicit DecompressingBuffer(const std::string& path, uint64_t start = 0);
  ~DecompressingBuffer() override;
  DecompressingBuffer(const DecompressingBuffer&) = delete;
  DecompressingBuffer& operator=(const DecompressingBuffer&) = delete;

  Compression compression() const { return compression_; }
  // Returns the bytes read from the file so far (compressed bytes for compressed files).
  uint64_t file_bytes_read() const { return file_offset_; }
  // Returns "" or what went wrong ("corrupt zstd stream at byte 1234: ...", "truncated gzip
  // stream: it ends at byte 5678 inside a frame"). A stream buffer cannot throw through
  // std::getline, so the reader asks after each read.
  const std::string& error() const { return error_; }
  // Returns the decompressed bytes buffered and not yet consumed, decoding more when none are
  // (empty at the end of the stream or on an error): readers scan them in place, no copy.
  std::string_view available();
  // Marks the first `count` bytes of available() as consumed.
  void consume(size_t count) { gbump(static_cast<int>(count)); }

 protected:
  int_type underflow() override;

 private:
  struct Decoder;
  // Reads more of the file into in_; returns false at its end.
  bool refill();
  // Decodes into out_; returns the bytes produced (0 at the end or on an error).
  size_t decode();

  std::string path_;
  std::ifstream file_;
  Compression compression_ = Compression::none;
  std::unique_ptr<Decoder> decoder_;
  std::vector<char> in_;
  size_t in_begin_ = 0, in_end_ = 0;  // unread compressed bytes: in_[in_begin_, in_end_)
  std::vector<char> out_;
  uint64_t file_offset_ = 0;
  bool file_done_ = false;
  std::string error_;
};

}  // namespace anvil
