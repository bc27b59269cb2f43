// Durable file helpers shared by every layer that writes to disk (safetensors, checkpoints,
// the trainer's config.toml and metrics). Invariant: a file written through AtomicFileWriter or
// write_file_atomic is either absent or complete at its final path, never partial: bytes go to
// `<path>.tmp`, are fsynced, renamed over the target, and the directory is fsynced. Every
// failure is an anvil::Error naming the file and the system's reason.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace anvil {

// Writes a file through a temporary sibling and renames it into place on commit(); if the
// writer is destroyed (or an error is thrown) before commit(), the temporary file is removed.
class AtomicFileWriter {
 public:
  // Creates (truncating) `<path>.tmp`; throws when it cannot be created.
  explicit AtomicFileWriter(std::filesystem::path path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  // Appends bytes; throws on any short or failed write (e.g. disk full).
  void write(const void* data, size_t bytes);
  void write(std::string_view bytes) { write(bytes.data(), bytes.size()); }
  // Returns the number of bytes written so far.
  uint64_t bytes_written() const { return written_; }
  // Fsyncs the data, renames the temporary over the final path and fsyncs the directory.
  void commit();

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::filesystem::path tmp_path_;
  int fd_ = -1;
  uint64_t written_ = 0;
  bool committed_ = false;
};

// Writes `bytes` to `path` atomically (temporary file, fsync, rename, fsync of the directory).
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);

// Returns the whole content of a file; throws naming the path when it cannot be read.
std::string read_file(const std::filesystem::path& path);

// Flushes a directory's entries (creations, renames, removals) to stable storage.
void fsync_dir(const std::filesystem::path& dir);

// Flushes an existing file's data and size to stable storage.
void fsync_file(const std::filesystem::path& path);

// Returns the xxHash64 (seed 0) of a file's content, streamed in 1 MiB blocks.
uint64_t xxhash64_file(const std::filesystem::path& path);

// Formats a 64-bit hash as 16 lower-case hex digits (the form manifests store).
std::string hash_hex(uint64_t hash);

// Returns this machine's host name ("unknown" when it has none), as lock records and
// TensorBoard event file names carry it.
std::string host_name();

// A read-only memory map of a whole file. The mapping lives as long as this object; moving
// it transfers ownership. An empty file maps to data() == nullptr and size() == 0.
class MappedFile {
 public:
  MappedFile() = default;
  // Maps `path` read-only; throws naming the path when it cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void unmap();
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace anvil
