// `anvil tokenize`: encodes text to ids (one JSON array per input line, the line without its
// '\n') or, with --decode, turns one JSON array of ids per line back into text. Reads stdin
// unless --input names a file; either may be compressed (data/line_reader.h reads it, and bounds
// a line before holding it). Output is buffered and written in large blocks.
#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "core/error.h"
#include "data/line_reader.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

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

std::vector<int32_t> parse_ids(std::string_view line, uint64_t line_number) {
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
  app.add_option("--input", input_path,
                 "read this file instead of standard input (either may be gzip, zstd or xz "
                 "compressed: found by its magic bytes)");
  app.add_flag("--decode", decode, "read one JSON array of ids per line and print its text");
  app.add_flag("--no-special", no_special,
               "do not add the tokenizer's post-processor tokens (e.g. BOS) when encoding");
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;
  add_max_record_bytes_option(app, max_record_bytes, "input line");
  if (!parse_args(app, args)) return 0;

  const auto tokenizer = Tokenizer::load(tokenizer_path);
  const std::string path = input_path.empty() ? "/dev/stdin" : input_path;
  {
    std::ifstream probe(path, std::ios::binary);
    ANVIL_CHECK(probe.good(), "[tokenize] {}: cannot open for reading", path);
  }
  LineReader reader(path, max_record_bytes);
  OutputBuffer out;
  std::string line;
  while (true) {
    const LineReader::Read read = reader.next(line);
    const uint64_t line_number = reader.lines();
    ANVIL_CHECK(reader.error().empty(), "[tokenize] {}:{}: {}", path,
                std::max<uint64_t>(line_number, 1), reader.error());
    if (read == LineReader::Read::end) break;
    ANVIL_CHECK(read == LineReader::Read::line,
                "[tokenize] {}:{}: the line at {} is longer than --max-record-bytes {}", path,
                line_number, reader.describe_offset(reader.line_offset()),
                describe_record_bound(reader.max_line_bytes()));
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
