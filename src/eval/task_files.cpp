// Task file readers (see task_files.h). Lines come from LineReader (data/line_reader.h): task
// files may be gzip, zstd or xz compressed, and a line is bounded before it is held. CSV
// parsing is libcsv's (RFC 4180: quoted fields may hold commas, doubled quotes and newlines);
// records are fed one line at a time so each keeps the line it starts on.
#include "eval/task_files.h"

#include <csv.h>
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <memory>

#include "core/error.h"
#include "data/line_reader.h"

namespace anvil {

std::string TaskRecord::where() const { return fmt::format("{}:{}", file.string(), line); }

const nlohmann::json& TaskRecord::field(const char* key) const {
  ANVIL_CHECK(fields.is_object() && fields.contains(key), "[eval] {}: missing field '{}'", where(),
              key);
  return fields[key];
}

std::string TaskRecord::text(const char* key) const {
  const nlohmann::json& value = field(key);
  ANVIL_CHECK(value.is_string(), "[eval] {}: field '{}' must be a string, got {}", where(), key,
              value.dump());
  return value.get<std::string>();
}

std::vector<std::string> TaskRecord::texts(const char* key) const {
  const nlohmann::json& value = field(key);
  ANVIL_CHECK(value.is_array() && !value.empty(),
              "[eval] {}: field '{}' must be a non-empty list of strings", where(), key);
  std::vector<std::string> out;
  for (const nlohmann::json& item : value) {
    ANVIL_CHECK(item.is_string(), "[eval] {}: field '{}' must hold strings, got {}", where(), key,
                item.dump());
    out.push_back(item.get<std::string>());
  }
  return out;
}

int TaskRecord::index(const char* key, int count, bool letters) const {
  const nlohmann::json& value = field(key);
  int64_t index = -1;
  if (value.is_number_integer()) {
    index = value.get<int64_t>();
  } else if (value.is_boolean()) {
    index = value.get<bool>() ? 1 : 0;
  } else if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (letters && s.size() == 1 && s[0] >= 'A' && s[0] <= 'Z') {
      index = s[0] - 'A';
    } else if (!s.empty() && s.size() < 10 &&
               s.find_first_not_of("0123456789") == std::string::npos) {
      index = std::stoll(s);
    }
  }
  const std::string allowed =
      letters ? fmt::format("0..{} or A..{}", count - 1, static_cast<char>('A' + count - 1))
              : fmt::format("0..{}", count - 1);
  ANVIL_CHECK(index >= 0 && index < count, "[eval] {}: field '{}' is {}, not an answer in {}",
              where(), key, value.dump(), allowed);
  return static_cast<int>(index);
}

namespace {

// Opens a task file for line reading (compressed or not, lines bounded); throws naming it.
std::unique_ptr<LineReader> open_task_file(const std::filesystem::path& file, const char* what,
                                           uint64_t max_record_bytes) {
  std::ifstream probe(file, std::ios::binary);
  ANVIL_CHECK(probe.good(), "[eval] {}: cannot open the {}", file.string(), what);
  return std::make_unique<LineReader>(file.string(), max_record_bytes);
}

// Reads the next line of a task file; false at its end. A damaged stream or a line over the
// bound is one error naming the file and line.
bool next_task_line(LineReader& lines, std::string& line) {
  const LineReader::Read read = lines.next(line);
  ANVIL_CHECK(lines.error().empty(), "[eval] {}:{}: {}", lines.path(),
              std::max<uint64_t>(lines.lines(), 1), lines.error());
  ANVIL_CHECK(read != LineReader::Read::too_long,
              "[eval] {}:{}: the line at {} is longer than the bound on one task record, {}",
              lines.path(), lines.lines(), lines.describe_offset(lines.line_offset()),
              describe_record_bound(lines.max_line_bytes()));
  return read == LineReader::Read::line;
}

}  // namespace

std::vector<TaskRecord> read_json_lines(const std::filesystem::path& file, int64_t limit,
                                        uint64_t max_record_bytes) {
  const std::unique_ptr<LineReader> lines = open_task_file(file, "task file", max_record_bytes);
  ANVIL_CHECK(!lines->starts_with_json_array(), "[eval] {}", json_array_refusal(file.string()));
  std::vector<TaskRecord> records;
  std::string line;
  while (next_task_line(*lines, line)) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    TaskRecord record;
    record.file = file;
    record.line = static_cast<int64_t>(lines->lines());
    try {
      record.fields = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& e) {
      ANVIL_FAIL("[eval] {}: not a JSON object: {}", record.where(), e.what());
    }
    ANVIL_CHECK(record.fields.is_object(), "[eval] {}: not a JSON object", record.where());
    records.push_back(std::move(record));
    if (limit > 0 && static_cast<int64_t>(records.size()) >= limit) break;
  }
  return records;
}

namespace {

struct CsvState {
  std::filesystem::path file;
  std::vector<std::string> fields;
  std::vector<TaskRecord> records;
  int64_t feeding_line = 0;  // the line being fed to the parser
  int64_t record_line = 1;   // the line where the current record started
  std::string error;
};

void on_field(void* data, size_t length, void* state_ptr) {
  auto* state = static_cast<CsvState*>(state_ptr);
  state->fields.emplace_back(data ? static_cast<const char*>(data) : "", length);
}

void on_record(int, void* state_ptr) {
  auto* state = static_cast<CsvState*>(state_ptr);
  const int64_t line = state->record_line;
  state->record_line = state->feeding_line + 1;
  std::vector<std::string> fields = std::move(state->fields);
  state->fields.clear();
  if (!state->error.empty()) return;
  const std::string where = fmt::format("{}:{}", state->file.string(), line);
  if (fields.size() != 6) {
    state->error = fmt::format("[eval] {}: {} columns, expected 6 (question, A, B, C, D, answer)",
                               where, fields.size());
    return;
  }
  const std::string& answer = fields[5];
  if (answer.size() != 1 || answer[0] < 'A' || answer[0] > 'D') {
    state->error =
        fmt::format("[eval] {}: the answer column is '{}', not one of A, B, C, D", where, answer);
    return;
  }
  TaskRecord record;
  record.file = state->file;
  record.line = line;
  record.fields = {{"question", fields[0]},
                   {"choices", {fields[1], fields[2], fields[3], fields[4]}},
                   {"answer", answer[0] - 'A'}};
  state->records.push_back(std::move(record));
}

}  // namespace

std::vector<TaskRecord> read_mmlu_csv(const std::filesystem::path& file, int64_t limit,
                                      uint64_t max_record_bytes) {
  const std::unique_ptr<LineReader> lines = open_task_file(file, "MMLU file", max_record_bytes);
  csv_parser parser;
  ANVIL_CHECK(csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) == 0, "[eval] csv_init failed");
  // libcsv trims spaces and tabs around unquoted fields by default; Python's csv module (which
  // wrote the MMLU release and which the harness's datasets read) keeps them, and a choice
  // such as "toward the therapist. " is scored with its space.
  csv_set_space_func(&parser, [](unsigned char) { return 0; });
  CsvState state;
  state.file = file;
  std::string line;
  bool ok = true;
  while (ok && state.error.empty() && next_task_line(*lines, line)) {
    ++state.feeding_line;
    if (state.feeding_line == 1 && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    line.push_back('\n');
    ok = csv_parse(&parser, line.data(), line.size(), on_field, on_record, &state) == line.size();
    if (limit > 0 && static_cast<int64_t>(state.records.size()) >= limit) break;
  }
  if (ok && state.error.empty()) ok = csv_fini(&parser, on_field, on_record, &state) == 0;
  const std::string parse_error = ok ? std::string() : csv_strerror(csv_error(&parser));
  csv_free(&parser);
  ANVIL_CHECK(state.error.empty(), "{}", state.error);
  ANVIL_CHECK(ok, "[eval] {}:{}: malformed CSV ({})", file.string(), state.record_line,
              parse_error);
  if (limit > 0 && static_cast<int64_t>(state.records.size()) > limit) state.records.resize(limit);
  return state.records;
}

}  // namespace anvil
