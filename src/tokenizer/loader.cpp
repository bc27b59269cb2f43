// Tokenizer::load: resolves a directory to its tokenizer file, reads it, fingerprints it and
// dispatches on its content (a JSON object is tokenizer.json, anything else must be tiktoken).
#include <filesystem>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#include "core/error.h"
#include "tokenizer/loaders.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

std::string resolve_path(const std::string& path) {
  std::error_code error;
  if (fs::is_directory(path, error)) {
    for (const char* name : {"tokenizer.json", "tokenizer.model"}) {
      const fs::path candidate = fs::path(path) / name;
      if (fs::exists(candidate, error)) return candidate.string();
    }
    ANVIL_FAIL("[tokenizer] {}: directory has neither tokenizer.json nor tokenizer.model", path);
  }
  ANVIL_CHECK(fs::exists(path, error), "[tokenizer] {}: no such file", path);
  return path;
}

std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), "[tokenizer] {}: cannot open for reading", path);
  std::ostringstream buffer;
  buffer << in.rdbuf();
  ANVIL_CHECK(!in.bad(), "[tokenizer] {}: read failed", path);
  return std::move(buffer).str();
}

}  // namespace

std::unique_ptr<Tokenizer> Tokenizer::load(const std::string& path) {
  const std::string file = resolve_path(path);
  const std::string content = read_whole_file(file);
  const size_t first = content.find_first_not_of(" \t\r\n");
  tok::BpeTokenizerParts parts = first != std::string::npos && content[first] == '{'
                                     ? tok::load_hf_json(file, content)
                                     : tok::load_tiktoken(file, content);
  parts.source_path = file;
  parts.fingerprint = fmt::format("{:016x}", XXH64(content.data(), content.size(), 0));
  return std::make_unique<tok::BpeTokenizer>(std::move(parts));
}

}  // namespace anvil
