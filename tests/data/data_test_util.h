// Helpers shared by the data-layer tests: a self-deleting temp folder, shard builders from
// synthetic token arrays (no tokenizer involved) and whole-file byte access for corruption.
#pragma once

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/shard_writer.h"

namespace anvil::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "anvil-data-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

inline void write_bytes(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}

// Writes one shard holding `documents` (each already ending with its EOS).
inline void write_shard(const std::string& path, const std::vector<std::vector<int32_t>>& documents,
                        uint32_t vocab_size, int32_t eos_id,
                        const std::vector<std::vector<uint8_t>>* masks = nullptr) {
  ShardWriterOptions options;
  options.vocab_size = vocab_size;
  options.eos_id = eos_id;
  options.tokenizer_fingerprint = "0123456789abcdef";
  options.with_loss_mask = masks != nullptr;
  ShardWriter writer(path, options);
  for (size_t d = 0; d < documents.size(); ++d) {
    if (masks != nullptr) {
      writer.add_document(documents[d], (*masks)[d]);
    } else {
      writer.add_document(documents[d]);
    }
  }
  writer.finish();
}

// Expects `fn` to throw anvil::Error whose message contains every string in `needles`.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& needles) {
  try {
    fn();
    ADD_FAILURE() << "expected an anvil::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const auto& needle : needles)
      EXPECT_NE(message.find(needle), std::string::npos) << "message: " << message;
  }
}

}  // namespace anvil::testing
