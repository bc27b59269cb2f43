// Shared glue of the fuzz targets (fuzz/*_fuzz.cpp). Each target hands the input bytes to the
// entry point the program uses for that kind of file. An anvil::Error is the expected outcome
// for bad input; anything else that escapes (another exception type, std::bad_alloc from a
// size taken on trust) reaches libFuzzer, or the replay main, as an uncaught exception and so
// counts as a crash, like sanitizer reports and aborts.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <system_error>

#include "core/error.h"

namespace anvil::fuzz {

// The record bound the line-oriented targets read with (--max-record-bytes): small, so a seed
// of a few KiB holds a record over it and reaches the skip-to-the-next-newline path.
inline constexpr uint64_t kFuzzMaxRecordBytes = 4096;

// Returns the input as text (parsers of text files take the bytes unchanged).
inline std::string_view as_text(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Runs `parse`, treating an anvil::Error as the expected rejection of bad input. With
// ANVIL_FUZZ_VERBOSE set, each rejection is printed (to check that seeds are accepted).
template <typename Parse>
void expect_error_or_success(Parse&& parse) {
  static const bool verbose = std::getenv("ANVIL_FUZZ_VERBOSE") != nullptr;
  try {
    parse();
    if (verbose) std::fprintf(stderr, "accepted\n");
  } catch (const anvil::Error& e) {
    if (verbose) std::fprintf(stderr, "rejected: %s\n", e.what());
  }
}

// A folder private to this process for the parsers that read files, removed at exit.
class ScratchDir {
 public:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/anvil-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code error;
    std::filesystem::remove_all(path_, error);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// Returns this process's scratch folder, created on first use.
inline const std::filesystem::path& scratch_dir() {
  static const ScratchDir dir;
  return dir.path();
}

// Writes `bytes` to `path` (creating its folder), replacing what was there.
inline void write_file_bytes(const std::filesystem::path& path, std::string_view bytes) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out.good()) std::abort();  // the scratch folder is broken: not a finding of the parser
}

// Writes the input to scratch_dir()/relative and returns the path.
inline std::filesystem::path write_scratch(const std::string& relative, const uint8_t* data,
                                           size_t size) {
  const std::filesystem::path path = scratch_dir() / relative;
  write_file_bytes(path, as_text(data, size));
  return path;
}

}  // namespace anvil::fuzz
