// Input resolution and document reading for `anvil prepare` (rules in corpus.h).
#include "data/corpus.h"

#include <glob.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <set>
#include <string_view>

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
  ANVIL_CHECK(options_.max_record_bytes > 0 && options_.max_record_bytes <= kLargestRecordBound,
              "[prepare] --max-record-bytes must be between 1 and {} (got {})",
              kLargestRecordBound, options_.max_record_bytes);
}

CorpusReader::CorpusReader(std::vector<std::string> files, CorpusOptions options)
    // `options` is copied, not moved: the arguments are evaluated in no fixed order, and
    // plan_pieces reads it.
    : CorpusReader(files, plan_pieces(files, options.text_field, kDefaultPieceBytes,
                                      options.doc_separator.has_value()),
                   options) {}

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
    } else {
      got = next_text(doc);
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
    const auto rows = static_cast<uint64_t>(parquet_->rows_in_group(static_cast<int>(piece.begin)));
    within = rows == 0 ? 0 : piece.bytes * (rows_before_batch_ + next_row_) / rows;
  } else if (lines_ != nullptr) {
    const uint64_t opened_at = piece.begin > 0 ? piece.begin - 1 : 0;
    within = lines_->file_bytes_read() - opened_at;
  }
  return pieces_done_bytes_ + std::min(within, piece.bytes);
}

namespace {

// Returns true for a file whose content is named .json (compressed or not).
bool is_json_named(const std::string& path) {
  return fs::path(strip_compression_suffix(path)).extension() == ".json";
}

}  // namespace

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
    parquet_->open_group(static_cast<int>(piece.begin));
    rows_.texts.clear();
    rows_.present.clear();
    next_row_ = 0;
    rows_before_batch_ = 0;
    return true;
  }
  parquet_.reset();
  parquet_file_ = SIZE_MAX;
  // A range after the first starts inside a line that the range before owns: open one byte
  // early and drop everything up to the first newline from there.
  const uint64_t opened_at = piece.begin > 0 ? piece.begin - 1 : 0;
  lines_ = std::make_unique<LineReader>(path, options_.max_record_bytes, opened_at);
  if (piece.begin == 0 && (piece.kind == PieceKind::jsonl || is_json_named(path))) {
    ANVIL_CHECK(!lines_->starts_with_json_array(), "[prepare] {}", json_array_refusal(path));
  }
  if (piece.begin > 0) {
    std::string none;
    if (lines_->next_part(none, 0) == LineReader::Part::more) lines_->skip_rest_of_line();
    check_stream();
  }
  lines_before_piece_ = lines_->lines();
  first_offsets_[current_] = lines_->offset();
  text_.clear();
  at_line_start_ = true;
  piece_ended_ = false;
  // A text range after the first owns the documents after its first separator line.
  owning_ = piece.kind != PieceKind::text_range || piece.begin == 0;
  owned_from_ = lines_->offset();
  owned_to_ = UINT64_MAX;
  return true;
}

void CorpusReader::close_piece() {
  if (lines_ != nullptr) {
    const uint64_t end = std::min(owned_to_, lines_->offset());
    if (end > owned_from_) bytes_read_ += end - owned_from_;
  }
  lines_.reset();
  std::string().swap(text_);
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

uint64_t CorpusReader::piece_line() const {
  if (lines_ == nullptr) return std::max<uint64_t>(line_number_, 1);
  return std::max<uint64_t>(lines_->lines() - lines_before_piece_, 1);
}

std::string CorpusReader::current_location() {
  Document here;
  here.piece = current_;
  here.line = piece_line();
  return location(here);
}

void CorpusReader::check_stream() {
  if (lines_ == nullptr || lines_->error().empty()) return;
  Document here;
  here.piece = current_;
  here.line = piece_line();
  ANVIL_FAIL("[prepare] {}: {}", location(here), lines_->error());
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
  while (true) {
    if (next_row_ == rows_.texts.size()) {
      rows_before_batch_ += rows_.texts.size();
      next_row_ = 0;
      if (!parquet_->next_batch(rows_)) return false;
      continue;
    }
    const size_t row = next_row_++;
    line_number_ = rows_before_batch_ + row + 1;
    if (!rows_.present[row]) {
      reject_record("field '" + options_.text_field + "' is null");
      continue;
    }
    bytes_read_ += rows_.texts[row].size();
    if (rows_.texts[row].size() > options_.max_record_bytes) {
      reject_record(fmt::format("its text is longer than --max-record-bytes {}",
                                describe_record_bound(options_.max_record_bytes)));
      std::string().swap(rows_.texts[row]);
      continue;
    }
    if (is_blank(rows_.texts[row])) {
      ++blank_documents_;
      continue;
    }
    doc.text = std::move(rows_.texts[row]);
    doc.line = line_number_;
    return true;
  }
}

bool CorpusReader::next_jsonl(Document& doc) {
  const InputPiece& piece = pieces_[current_];
  std::string line;
  while (lines_->offset() < piece.end) {
    const LineReader::Read read = lines_->next(line);
    check_stream();  // a damaged stream's last line is not a line
    if (read == LineReader::Read::end) break;
    if (read == LineReader::Read::too_long) {
      reject_record(fmt::format("the record at {} is longer than --max-record-bytes {}",
                                lines_->describe_offset(lines_->line_offset()),
                                describe_record_bound(options_.max_record_bytes)));
      continue;
    }
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
    doc.line = piece_line();
    return true;
  }
  owned_to_ = lines_->offset();
  return false;
}

bool CorpusReader::take_text(Document& doc, bool document_ended) {
  const size_t bound = options_.max_record_bytes;
  size_t cut = text_.size();
  if (text_.size() > bound) {
    // A document longer than the bound: its first piece ends after the last whitespace byte
    // inside the bound (a byte no UTF-8 sequence contains, so no character is split).
    const size_t last_space = text_.find_last_of(" \t\n\r\v\f", bound - 1);
    if (last_space == std::string::npos) {
      reject_record(fmt::format(
          "no whitespace in {} of text (a document longer than --max-record-bytes is cut at "
          "whitespace; this is not text)",
          describe_record_bound(bound)));
      text_.erase(0, bound);  // no newline in there either: the first line stays right
      return false;
    }
    cut = last_space + 1;
  } else if (!document_ended) {
    return false;
  }
  const uint64_t first_line = text_first_line_;
  text_first_line_ += static_cast<uint64_t>(std::count(text_.begin(), text_.begin() + cut, '\n'));
  std::string piece;
  if (cut == text_.size()) {
    piece = std::move(text_);
    text_.clear();
  } else {
    piece = text_.substr(0, cut);
    text_.erase(0, cut);
  }
  if (is_blank(piece)) {
    if (!piece.empty()) ++blank_documents_;
    return false;
  }
  doc.text = std::move(piece);
  doc.line = first_line;
  return true;
}

bool CorpusReader::at_separator() {
  const InputPiece& piece = pieces_[current_];
  const uint64_t separator_at = lines_->line_offset();
  if (!owning_) {
    if (separator_at >= piece.end) {
      owned_to_ = owned_from_;  // the range holds no document start: nothing of it is its own
      return false;
    }
    owning_ = true;
    owned_from_ = separator_at;
    return true;
  }
  if (piece.kind == PieceKind::text_range && separator_at >= piece.end) {
    owned_to_ = separator_at;
    return false;
  }
  return true;
}

bool CorpusReader::next_text(Document& doc) {
  const std::optional<std::string>& separator = options_.doc_separator;
  const size_t bound = options_.max_record_bytes;
  while (true) {
    if (text_.size() > bound) {
      if (take_text(doc, false)) return true;
      continue;
    }
    if (piece_ended_) return !text_.empty() && take_text(doc, true);
    // Room for one byte past the bound (to see that a document is longer), and at least for
    // a separator line with its '\r' (so one is never split across reads).
    const size_t room = std::max(bound + 1 - text_.size(),
                                 separator ? separator->size() + 2 : size_t{1});
    const size_t before = text_.size();
    const bool line_start = at_line_start_;
    const LineReader::Part part = lines_->next_part(text_, room);
    check_stream();
    if (part == LineReader::Part::input_end) {
      piece_ended_ = true;
      owned_to_ = std::min(owned_to_, lines_->offset());
      // An empty file read as one document is a blank document, as a whitespace one is.
      if (pieces_[current_].kind == PieceKind::whole_file && !separator && lines_->offset() == 0)
        ++blank_documents_;
      continue;
    }
    at_line_start_ = part == LineReader::Part::line_end;
    if (before == 0) text_first_line_ = piece_line();
    if (separator && line_start && part == LineReader::Part::line_end) {
      std::string_view content = std::string_view(text_).substr(before);
      if (!content.empty() && content.back() == '\r') content.remove_suffix(1);
      if (content == *separator) {
        text_.resize(before);
        const bool was_owning = owning_;
        if (!at_separator()) {
          piece_ended_ = true;
          continue;
        }
        if (was_owning) {
          // The separator ends a document: hand it out (or count it as blank) as a whole.
          const bool got = take_text(doc, true);
          text_.clear();
          if (got) return true;
        }
        continue;
      }
    }
    if (part == LineReader::Part::line_end && lines_->ended_with_newline()) text_ += '\n';
    if (!owning_) text_.clear();  // the range before owns this document
  }
}

}  // namespace anvil
