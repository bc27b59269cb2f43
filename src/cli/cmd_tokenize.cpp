// `anvil tokenize`: encodes text to ids (one JSON array per input line, the line without its
// '\n') or, with --decode, turns one JSON array of ids per line back into text. Reads stdin
// unless --input names a file; output is buffered and written in large blocks.
#include <cstdio>
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

// Reads '\n'-terminated lines from a FILE in large blocks.
class LineReader {
 public:
  explicit LineReader(std::FILE* file) : file_(file) {}

  // Sets `line` to the next line without its '\n'; returns false at the end of input.
  bool next(std::string_view& line) {
    while (true) {
      const size_t newline = buffer_.find('\n', start_);
      if (newline != std::string::npos) {
        line = std::string_view(buffer_).substr(start_, newline - start_);
        start_ = newline + 1;
        return true;
      }
      if (eof_) {
        if (start_ >= buffer_.size()) return false;
        line = std::string_view(buffer_).substr(start_);
        start_ = buffer_.size();
        return true;
      }
      buffer_.erase(0, start_);
      start_ = 0;
      const size_t old_size = buffer_.size();
      buffer_.resize(old_size + kChunk);
      const size_t got = std::fread(buffer_.data() + old_size, 1, kChunk, file_);
      buffer_.resize(old_size + got);
      ANVIL_CHECK(!std::ferror(file_), "[tokenize] read error on input");
      eof_ = got == 0;
    }
  }

 private:
  static constexpr size_t kChunk = size_t{1} << 20;
  std::FILE* file_;
  std::string buffer_;
  size_t start_ = 0;
  bool eof_ = false;
};

class OutputBuffer {
 public:
  ~OutputBuffer() { flush(); }
  std::string& text() { return text_; }
  void maybe_flush() {
    if (text_.size() >= (size_t{1} << 20)) flush();
  }
  void flush() {
    if (!text_.empty()) std::fwrite(text_.data(), 1, text_.size(), stdout);
    text_.clear();
  }

 private:
  std::string text_;
};

std::vector<int32_t> parse_ids(std::string_view line, size_t line_number) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception&) {
    ANVIL_FAIL("[tokenize] --decode: line {} is not a JSON array of ids", line_number);
  }
  ANVIL_CHECK(parsed.is_array(), "[tokenize] --decode: line {} is not a JSON array of ids",
              line_number);
  std::vector<int32_t> ids;
  for (const auto& id : parsed) {
    ANVIL_CHECK(id.is_number_integer() && id.get<int64_t>() >= INT32_MIN &&
                    id.get<int64_t>() <= INT32_MAX,
                "[tokenize] --decode: line {} holds a non-integer id {}", line_number, id.dump());
    ids.push_back(id.get<int32_t>());
  }
  return ids;
}

int run_tokenize(const std::vector<std::string>& args) {
  CLI::App app(
      "Encode text to token ids, one JSON array per input line (the line without its '\\n'), "
      "or decode such arrays back to text. Special tokens written in the text (e.g. "
      "<|eot_id|>) are encoded as themselves.",
      "anvil tokenize");
  std::string tokenizer_path;
  std::string input_path;
  bool decode = false;
  bool no_special = false;
  app.add_option("--tokenizer", tokenizer_path,
                 "tokenizer.json (Hugging Face), tokenizer.model (tiktoken format, Llama 3), or a "
                 "directory holding one")
      ->required();
  app.add_option("--input", input_path, "read this file instead of standard input");
  app.add_flag("--decode", decode, "read one JSON array of ids per line and print its text");
  app.add_flag("--no-special", no_special,
               "do not add the tokenizer's post-processor tokens (e.g. BOS) when encoding");
  if (!parse_args(app, args)) return 0;

  const auto tokenizer = Tokenizer::load(tokenizer_path);
  std::FILE* input = stdin;
  if (!input_path.empty()) {
    input = std::fopen(input_path.c_str(), "rb");
    ANVIL_CHECK(input != nullptr, "[tokenize] {}: cannot open for reading", input_path);
  }
  struct Closer {
    std::FILE* file;
    ~Closer() {
      if (file != stdin) std::fclose(file);
    }
  } closer{input};

  LineReader reader(input);
  OutputBuffer out;
  std::string_view line;
  size_t line_number = 0;
  while (reader.next(line)) {
    ++line_number;
    if (decode) {
      out.text().append(tokenizer->decode(parse_ids(line, line_number)));
      out.text().push_back('\n');
    } else {
      const std::vector<int32_t> ids = tokenizer->encode(line, !no_special);
      std::string& text = out.text();
      text.push_back('[');
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) text.push_back(',');
        fmt::format_to(std::back_inserter(text), "{}", ids[i]);
      }
      text.append("]\n");
    }
    out.maybe_flush();
  }
  out.flush();
  std::fflush(stdout);
  return 0;
}

}  // namespace

ANVIL_COMMAND("tokenize", "encode text to token ids or decode ids (--decode)", 60, run_tokenize);

}  // namespace anvil::cli
