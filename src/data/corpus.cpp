// Input resolution and document reading for `anvil prepare` (rules in corpus.h).
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace anvil {
namespace fs = std::filesystem;
namespace {

constexpr size_t kBinaryProbeBytes = 8192;
constexpr uint64_t kMaxListedWarnings = 20;

// A compressed file is judged by what it holds, which is read when it is prepared.
bool looks_binary(const fs::path& path) {
  if (detect_compression(path.string()) != Compression::none) return false;
  if (is_parquet_file(path.string())) return false;
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.is_open(), "[prepare] {}: cannot open: {}", path.string(), std::strerror(errno));
  char probe[kBinaryProbeBytes];
  in.read(probe, sizeof(probe));
  return std::memchr(probe, '\0', static_cast<size_t>(in.gcount())) != nullptr;
}

bool is_hidden(const fs::path& path) {
  const std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

bool is_blank(const std::string& text) {
  return std::all_of(text.begin(), text.end(), [](char c) {
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
  });
}

bool has_glob_characters(const std::string& text) {
  return text.find_first_of("*?[") != std::string::npos;
}

std::vector<std::string> expand_glob(const std::string& pattern) {
  glob_t matches{};
  const int result = ::glob(pattern.c_str(), 0, nullptr, &matches);
  std::vector<std::string> paths;
  if (result == 0)
    for (size_t i = 0; i < matches.gl_pathc; ++i) paths.emplace_back(matches.gl_pathv[i]);
  ::globfree(&matches);
  ANVIL_CHECK(result == 0 || result == GLOB_NOMATCH, "[prepare] cannot expand input pattern '{}'",
              pattern);
  return paths;  // glob(3) returns them sorted
}

class InputCollector {
 public:
  void add_argument(const std::string& argument) {
    std::error_code ec;
    if (fs::exists(argument, ec)) {
      add_path(argument);
      return;
    }
    ANVIL_CHECK(has_glob_characters(argument), "[prepare] input not found: {}", argument);
    const auto matches = expand_glob(argument);
    ANVIL_CHECK(!matches.empty(), "[prepare] input pattern '{}' matches no files", argument);
    for (const auto& match : matches) add_path(match);
  }

  ResolvedInputs take() { return std::move(result_); }

 private:
  void add_path(const fs::path& path) {
    if (fs::is_directory(path)) {
      walk_folder(path);
      return;
    }
    ANVIL_CHECK(fs::is_regular_file(path), "[prepare] input {} is not a regular file or folder",
                path.string());
    if (!claim(path)) return;
    ANVIL_CHECK(!looks_binary(path),
                "[prepare] input {} looks binary (NUL byte in its first 8 KiB); only text and "
                "JSONL files can be prepared",
                path.string());
    result_.files.push_back(path.string());
  }

  void walk_folder(const fs::path& folder) {
    std::vector<fs::path> found;
    std::error_code ec;
    fs::recursive_directory_iterator it(folder, ec), end;
    ANVIL_CHECK(!ec, "[prepare] cannot list folder {}: {}", folder.string(), ec.message());
    for (; it != end; it.increment(ec)) {
      ANVIL_CHECK(!ec, "[prepare] cannot list folder {}: {}", folder.string(), ec.message());
      if (is_hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file()) found.push_back(it->path());
    }
    ANVIL_CHECK(!ec, "[prepare] cannot list folder {}: {}", folder.string(), ec.message());
    std::sort(found.begin(), found.end(),
              [](const fs::path& a, const fs::path& b) { return a.string() < b.string(); });
    for (const auto& path : found) {
      if (!claim(path)) continue;
      if (looks_binary(path)) {
        result_.skipped_binary.push_back(path.string());
        continue;
      }
      result_.files.push_back(path.string());
    }
  }

  // Records the file's canonical identity; returns false (and notes it) when already listed.
  bool claim(const fs::path& path) {
    const std::string identity = fs::canonical(path).string();
    if (seen_.insert(identity).second) return true;
    result_.skipped_duplicates.push_back(path.string());
    return false;
  }

  ResolvedInputs result_;
  std::set<std::string> seen_;
};

}  // namespace

ResolvedInputs resolve_inputs(const std::vector<std::string>& inputs) {
  ANVIL_CHECK(!inputs.empty(), "[prepare] no inputs given");
  InputCollector collector;
  for (const auto& argument : inputs) collector.add_argument(argument);
  return collector.take();
}

bool is_jsonl_path(const std::string& path) {
  const std::string content_name = strip_compression_suffix(path);
  const std::string extension = fs::path(content_name).extension().string();
  return extension == ".jsonl" || extension == ".ndjson" ||
         (extension == ".json" && content_name != path);
}

CorpusReader::CorpusReader(std::vector<std::string> files, std::vector<InputPiece> pieces,
                           CorpusOptions options)
    : files_(std::move(files)),
      pieces_(std::move(pieces)),
      options_(std::move(options)),
      first_lines_(pieces_.size(), 0),
      first_offsets_(pieces_.size(), 0),
      documents_per_file_(files_.size()) {
  ANVIL_CHECK(!options_.text_field.empty(), "[prepare] --text-field must not be empty");
  ANVIL_CHECK(!options_.doc_separator || !options_.doc_separator->empty(),
              "[prepare] --doc-separator must not be empty");
}

CorpusReader::CorpusReader(std::vector<std::string> files, CorpusOptions options)
    : CorpusReader(files, plan_pieces(files, options.text_field, kDefaultPieceBytes),
                   std::move(options)) {}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::next(Document& doc) {
  while (true) {
    if (!piece_open_ && !open_next_piece()) return false;
    const InputPiece& piece = pieces_[current_];
    bool got;
    if (piece.kind == PieceKind::parquet) {
      got = next_parquet(doc);
    } else if (piece.kind == PieceKind::jsonl) {
      got = next_jsonl(doc);
    } else if (options_.doc_separator) {
      got = next_separated(doc);
    } else {
      got = next_whole_file(doc);
    }
    if (buffer_ != nullptr) {
      check_stream();
      ANVIL_CHECK(!stream_.bad(), "[prepare] {}: read error", files_[piece.file]);
    }
    if (got) {
      doc.file = piece.file;
      doc.piece = current_;
      ++documents_per_file_[piece.file];
      return true;
    }
    close_piece();
  }
}

uint64_t CorpusReader::progress_bytes() const {
  if (!piece_open_) return pieces_done_bytes_;
  const InputPiece& piece = pieces_[current_];
  uint64_t within = 0;
  if (piece.kind == PieceKind::parquet) {
    within = rows_.texts.empty() ? 0 : piece.bytes * next_row_ / rows_.texts.size();
  } else if (buffer_ != nullptr) {
    const uint64_t opened_at = piece.begin > 0 ? piece.begin - 1 : 0;
    within = buffer_->file_bytes_read() - opened_at;
  }
  return pieces_done_bytes_ + std::min(within, piece.bytes);
}

bool CorpusReader::open_next_piece() {
  if (next_piece_ >= pieces_.size()) return false;
  current_ = next_piece_++;
  const InputPiece& piece = pieces_[current_];
  const std::string& path = files_[piece.file];
  piece_open_ = true;
  line_number_ = 0;
  if (piece.kind == PieceKind::parquet) {
    if (parquet_file_ != piece.file) {
      parquet_ = std::make_unique<ParquetTextReader>(path, options_.text_field);
      parquet_file_ = piece.file;
    }
    parquet_->read_group(static_cast<int>(piece.begin), rows_);
    next_row_ = 0;
    return true;
  }
  parquet_.reset();
  parquet_file_ = SIZE_MAX;
  // A range after the first starts inside a line that the range before owns: open one byte
  // early and drop everything up to the first newline from there.
  const uint64_t opened_at = piece.begin > 0 ? piece.begin - 1 : 0;
  buffer_ = std::make_unique<DecompressingBuffer>(path, opened_at);
  stream_.rdbuf(buffer_.get());
  stream_.clear();
  next_offset_ = opened_at;
  if (piece.begin > 0) {
    std::string partial;
    std::getline(stream_, partial);
    check_stream();
    next_offset_ += partial.size() + 1;
  }
  first_offsets_[current_] = next_offset_;
  return true;
}

void CorpusReader::close_piece() {
  stream_.rdbuf(nullptr);
  buffer_.reset();
  rows_.texts.clear();
  rows_.present.clear();
  piece_open_ = false;
  pieces_done_bytes_ += pieces_[current_].bytes;
}

uint64_t CorpusReader::first_line_of_piece(size_t p) {
  if (first_lines_[p] != 0) return first_lines_[p];
  uint64_t newlines = 0;
  if (first_offsets_[p] > 0) {
    std::ifstream in(files_[pieces_[p].file], std::ios::binary);
    std::vector<char> block(size_t{1} << 20);
    uint64_t left = first_offsets_[p];
    while (left > 0 && in) {
      in.read(block.data(), static_cast<std::streamsize>(std::min<uint64_t>(left, block.size())));
      const auto got = static_cast<size_t>(in.gcount());
      newlines += static_cast<uint64_t>(std::count(block.data(), block.data() + got, '\n'));
      left -= got;
    }
  }
  first_lines_[p] = newlines + 1;
  return first_lines_[p];
}

std::string CorpusReader::location(const Document& doc) {
  const InputPiece& piece = pieces_[doc.piece];
  if (piece.kind == PieceKind::parquet)
    return fmt::format("{}: row {}", files_[piece.file], piece.end + doc.line);
  return fmt::format("{}:{}", files_[piece.file], first_line_of_piece(doc.piece) + doc.line - 1);
}

std::string CorpusReader::current_location() {
  Document here;
  here.piece = current_;
  here.line = std::max<uint64_t>(line_number_, 1);
  return location(here);
}

void CorpusReader::check_stream() {
  if (buffer_ == nullptr || buffer_->error().empty()) return;
  Document here;
  here.piece = current_;
  here.line = line_number_ + 1;
  ANVIL_FAIL("[prepare] {}: {}", location(here), buffer_->error());
}

bool CorpusReader::read_line(std::string& line) {
  const InputPiece& piece = pieces_[current_];
  if (piece.kind == PieceKind::jsonl && next_offset_ >= piece.end) return false;
  const bool got = static_cast<bool>(std::getline(stream_, line));
  check_stream();  // a damaged stream's last line is not a line
  if (!got) return false;
  ++line_number_;
  const uint64_t size = line.size() + (stream_.eof() ? 0 : 1);
  next_offset_ += size;
  bytes_read_ += size;
  return true;
}

void CorpusReader::reject_record(const std::string& reason) {
  const std::string where = current_location();
  ANVIL_CHECK(options_.skip_bad_records,
              "[prepare] {}: {} (use --on-error skip to skip such records)", where, reason);
  ++skipped_records_;
  if (skipped_records_ <= kMaxListedWarnings) log_warn("[prepare] {}: {}; skipped", where, reason);
  if (skipped_records_ == kMaxListedWarnings)
    log_warn("[prepare] further bad records are skipped without a warning each");
}

bool CorpusReader::next_parquet(Document& doc) {
  while (next_row_ < rows_.texts.size()) {
    const size_t row = next_row_++;
    line_number_ = row + 1;
    if (!rows_.present[row]) {
      reject_record("field '" + options_.text_field + "' is null");
      continue;
    }
    bytes_read_ += rows_.texts[row].size();
    if (is_blank(rows_.texts[row])) {
      ++blank_documents_;
      continue;
    }
    doc.text = std::move(rows_.texts[row]);
    doc.line = line_number_;
    return true;
  }
  return false;
}

bool CorpusReader::next_jsonl(Document& doc) {
  std::string line;
  while (read_line(line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    nlohmann::json record;
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {  // bad syntax, or a number out of range
      std::string reason = e.what();
      const size_t tag_end = reason.find("] ");
      if (tag_end != std::string::npos) reason.erase(0, tag_end + 2);
      reject_record("invalid JSON: " + reason);
      continue;
    }
    if (!record.is_object()) {
      reject_record("record is not a JSON object");
      continue;
    }
    const auto field = record.find(options_.text_field);
    if (field == record.end()) {
      reject_record("record has no '" + options_.text_field + "' field");
      continue;
    }
    if (!field->is_string()) {
      reject_record("field '" + options_.text_field + "' is not a string");
      continue;
    }
    std::string text = field->get<std::string>();
    if (is_blank(text)) {
      ++blank_documents_;
      continue;
    }
    doc.text = std::move(text);
    doc.line = line_number_;
    return true;
  }
  return false;
}

bool CorpusReader::next_separated(Document& doc) {
  std::string line;
  std::string piece;
  uint64_t first_line = 0;
  bool any_line = false;
  while (read_line(line)) {
    any_line = true;
    const bool had_newline = !stream_.eof();
    std::string_view content(line);
    if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
    if (content == *options_.doc_separator) {
      if (!is_blank(piece)) {
        doc.text = std::move(piece);
        doc.line = first_line;
        return true;
      }
      if (!piece.empty()) ++blank_documents_;
      piece.clear();
      continue;
    }
    if (piece.empty()) first_line = line_number_;
    piece += line;
    if (had_newline) piece += '\n';
  }
  if (!any_line) return false;
  if (is_blank(piece)) {
    if (!piece.empty()) ++blank_documents_;
    return false;
  }
  doc.text = std::move(piece);
  doc.line = first_line;
  return true;
}

bool CorpusReader::next_whole_file(Document& doc) {
  if (line_number_ != 0) return false;  // this file's single document was already read
  std::ostringstream contents;
  contents << stream_.rdbuf();
  check_stream();
  line_number_ = 1;
  std::string text = std::move(contents).str();
  bytes_read_ += text.size();
  if (is_blank(text)) {
    ++blank_documents_;
    return false;
  }
  doc.text = std::move(text);
  doc.line = 1;
  return true;
}

}  // namespace anvil
