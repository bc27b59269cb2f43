// Meta's tiktoken-format tokenizer.model -> BpeTokenizerParts. Each line is "<base64 token>
// <rank>"; ranks must be exactly 0..n-1 and are the ids. tiktoken merges any two adjacent parts
// whose concatenation is a token, lowest rank first, after emitting a piece that is itself a
// token whole; that is a BPE whose merges are every split of every token into two tokens,
// ranked by the merged token, with ignore_merges. The 256 Llama 3 special tokens follow the
// ranks (Llama 3.1 names, REFERENCE.md 1.3); encode matches them in text (tiktoken's
// allowed_special="all") and add_special prepends <|begin_of_text|>.
#include <algorithm>
#include <array>

#include <fmt/format.h>

#include "core/error.h"
#include "tokenizer/loaders.h"

namespace anvil::tok {
namespace {

constexpr int kReservedSpecials = 256;

std::vector<std::string> llama3_special_tokens() {
  std::vector<std::string> names = {
      "<|begin_of_text|>",          "<|end_of_text|>",         "<|reserved_special_token_0|>",
      "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
      "<|start_header_id|>",        "<|end_header_id|>",       "<|eom_id|>",
      "<|eot_id|>",                 "<|python_tag|>"};
  for (int i = 3; names.size() < kReservedSpecials; ++i)
    names.push_back(fmt::format("<|reserved_special_token_{}|>", i));
  return names;
}

// Decodes standard base64 (with optional '=' padding); returns false on a bad character.
bool base64_decode(std::string_view text, std::string& out) {
  static const std::array<int8_t, 256> table = [] {
    std::array<int8_t, 256> t{};
    t.fill(-1);
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (int i = 0; i < 64; ++i)
      t[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
    return t;
  }();
  out.clear();
  uint32_t buffer = 0;
  int bits = 0;
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '=') --end;
  for (size_t i = 0; i < end; ++i) {
    const int value = table[static_cast<unsigned char>(text[i])];
    if (value < 0) return false;
    buffer = (buffer << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> bits) & 0xFF));
    }
  }
  return !out.empty();
}

}  // namespace

BpeTokenizerParts load_tiktoken(const std::string& path, const std::string& content) {
  std::vector<std::string> tokens;  // index = rank
  std::vector<uint8_t> seen;
  StringIdMap vocab;
  size_t line_start = 0;
  size_t line_number = 0;
  std::string bytes;
  // Ranks are 0..n-1 with one per line, so a rank past the line count is an error before it
  // can size the tables (a one-line file must not allocate for rank 2^31).
  const size_t line_count =
      static_cast<size_t>(std::count(content.begin(), content.end(), '\n')) + 1;
  while (line_start < content.size()) {
    size_t line_end = content.find('\n', line_start);
    if (line_end == std::string::npos) line_end = content.size();
    std::string_view line(content.data() + line_start, line_end - line_start);
    line_start = line_end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find_first_not_of(" \t") == std::string_view::npos) continue;
    const size_t space = line.find(' ');
    ANVIL_CHECK(space != std::string_view::npos && base64_decode(line.substr(0, space), bytes),
                "[tokenizer] {}: line {} is not '<base64> <rank>'; neither tokenizer.json nor a "
                "tiktoken-format file (SentencePiece .model files are not supported; use the "
                "model's tokenizer.json)",
                path, line_number);
    const std::string_view rank_text = line.substr(space + 1);
    int64_t rank = 0;
    for (char c : rank_text) {
      ANVIL_CHECK(c >= '0' && c <= '9' && rank < INT32_MAX / 10,
                  "[tokenizer] {}: line {} has an invalid rank '{}'", path, line_number, rank_text);
      rank = rank * 10 + (c - '0');
    }
    ANVIL_CHECK(!rank_text.empty(), "[tokenizer] {}: line {} has no rank", path, line_number);
    ANVIL_CHECK(static_cast<size_t>(rank) < line_count,
                "[tokenizer] {}: line {} has rank {}, but the file has only {} lines (ranks must "
                "be 0..n-1)",
                path, line_number, rank, line_count);
    if (static_cast<size_t>(rank) >= tokens.size()) {
      tokens.resize(static_cast<size_t>(rank) + 1);
      seen.resize(static_cast<size_t>(rank) + 1, 0);
    }
    ANVIL_CHECK(!seen[rank] && vocab.insert(bytes, static_cast<int32_t>(rank)),
                "[tokenizer] {}: line {} repeats rank {} or its token", path, line_number, rank);
    seen[rank] = 1;
    tokens[rank] = bytes;
  }
  ANVIL_CHECK(!tokens.empty(), "[tokenizer] {}: file holds no tokens", path);
  for (size_t rank = 0; rank < seen.size(); ++rank)
    ANVIL_CHECK(seen[rank], "[tokenizer] {}: rank {} is missing (ranks must be 0..{})", path, rank,
                tokens.size() - 1);
  for (int b = 0; b < 256; ++b) {
    const char byte = static_cast<char>(b);
    ANVIL_CHECK(vocab.find(std::string_view(&byte, 1)).has_value(),
                "[tokenizer] {}: the single byte 0x{:02X} has no token", path, b);
  }

  std::vector<BpeMerge> merges;
  for (size_t rank = 0; rank < tokens.size(); ++rank) {
    const std::string_view token = tokens[rank];
    for (size_t cut = 1; cut < token.size(); ++cut) {
      const auto left = vocab.find(token.substr(0, cut));
      const auto right = vocab.find(token.substr(cut));
      if (left && right)
        merges.push_back({*left, *right, static_cast<int32_t>(rank), static_cast<uint32_t>(rank)});
    }
  }

  BpeTokenizerParts parts;
  const int32_t first_special = static_cast<int32_t>(tokens.size());
  const std::vector<std::string> specials = llama3_special_tokens();
  parts.id_to_token = std::move(tokens);
  for (size_t i = 0; i < specials.size(); ++i) {
    AddedToken token;
    token.content = specials[i];
    token.id = first_special + static_cast<int32_t>(i);
    token.special = true;
    parts.token_ids.insert(token.content, token.id);
    parts.id_to_token.push_back(token.content);
    parts.added_tokens.push_back(std::move(token));
  }
  parts.id_assigned.assign(parts.id_to_token.size(), 1);
  for (size_t rank = 0; rank < static_cast<size_t>(first_special); ++rank)
    parts.token_ids.insert(parts.id_to_token[rank], static_cast<int32_t>(rank));

  BpeConfig config;
  config.byte_units = true;
  config.ignore_merges = true;
  parts.model = std::make_unique<BpeModel>(config, std::move(vocab), merges);
  parts.pre_tokenizer = make_isolating_split(kLlama3Pattern, path);
  parts.decoder = make_concat_decoder();
  parts.meta_pre_split = true;
  parts.bos_id = first_special;
  parts.eos_id = first_special + 1;
  parts.affixes.prefix = {first_special};
  return parts;
}

}  // namespace anvil::tok
