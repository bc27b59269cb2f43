// Helpers shared by the tokenizer tests: fixture paths, the cases of a <name>.expected.json
// written by tools/tokenizer_fixtures.py, and a scratch directory removed after each test.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace anvil::test {

inline std::string fixture_path(const std::string& name) {
  return std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/" + name;
}

inline std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return std::move(buffer).str();
}

// FNV-1a over 32-bit ids, as the fixture script hashes long id lists.
inline std::string fnv1a(const std::vector<int32_t>& ids) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int32_t id : ids) {
    h ^= static_cast<uint32_t>(id);
    h *= 0x100000001b3ull;
  }
  return fmt::format("{:016x}", h);
}

struct ExpectedCase {
  std::string name;
  std::string text;
  std::optional<std::vector<int32_t>> ids;  // absent for long cases: compare length + hash
  std::optional<std::vector<int32_t>> ids_special;
  size_t ids_len = 0;
  std::string ids_fnv;
  size_t ids_special_len = 0;
  std::string ids_special_fnv;
  std::optional<std::string> decoded;
  // A text whose HF normalization differs from Python's unicodedata because HF's Unicode
  // tables are older: the ids of the unicodedata-normalized text, which utf8proc matches.
  std::optional<std::vector<int32_t>> gap_ids;
  std::optional<std::vector<int32_t>> gap_ids_special;
};

struct ExpectedFile {
  std::string tokenizer;  // file name beside the expected file
  std::vector<ExpectedCase> cases;
};

inline ExpectedFile load_expected(const std::string& name) {
  const auto root = nlohmann::json::parse(read_text(fixture_path(name + ".expected.json")));
  ExpectedFile file;
  file.tokenizer = root.at("tokenizer").get<std::string>();
  for (const auto& c : root.at("cases")) {
    ExpectedCase out;
    out.name = c.at("name").get<std::string>();
    if (c.contains("text")) {
      out.text = c["text"].get<std::string>();
    } else {
      for (const auto& part : c.at("parts"))
        for (int i = 0; i < part[1].get<int>(); ++i) out.text += part[0].get<std::string>();
    }
    if (c.contains("ids")) {
      out.ids = c["ids"].get<std::vector<int32_t>>();
      out.ids_special = c["ids_special"].get<std::vector<int32_t>>();
    } else {
      out.ids_len = c.at("ids_len").get<size_t>();
      out.ids_fnv = c.at("ids_fnv").get<std::string>();
      out.ids_special_len = c.at("ids_special_len").get<size_t>();
      out.ids_special_fnv = c.at("ids_special_fnv").get<std::string>();
    }
    if (c.contains("decoded")) out.decoded = c["decoded"].get<std::string>();
    if (c.contains("unicode_gap")) {
      out.gap_ids = c["unicode_gap"].at("ids").get<std::vector<int32_t>>();
      out.gap_ids_special = c["unicode_gap"].at("ids_special").get<std::vector<int32_t>>();
    }
    file.cases.push_back(std::move(out));
  }
  return file;
}

// A fresh directory under the system temp dir, removed on destruction.
class ScratchDir {
 public:
  explicit ScratchDir(const std::string& tag) {
    static int counter = 0;
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("anvil-tok-{}-{}-{}", tag, ::getpid(), counter++);
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }
  void write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name, std::ios::binary) << content;
  }

 private:
  std::filesystem::path path_;
};

}  // namespace anvil::test
