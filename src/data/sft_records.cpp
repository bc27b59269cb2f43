// SFT JSONL parsing: one record per line, chat or alpaca form (see sft_records.h). Validation
// here covers everything that needs no tokenizer; over-long examples are found when rendering.
#include "data/sft_records.h"

#include <algorithm>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"

namespace anvil {
namespace {

using nlohmann::json;

// Returns true when the text has no character other than ASCII whitespace.
bool is_blank(std::string_view text) {
  return text.find_first_not_of(" \t\r\n\v\f") == std::string_view::npos;
}

// Returns the string value of `key` in `object`, or nullopt when absent or null; throws
// naming `what` when the value is another type.
std::optional<std::string> optional_string(const json& object, const char* key,
                                           const std::string& what) {
  const auto it = object.find(key);
  if (it == object.end() || it->is_null()) return std::nullopt;
  ANVIL_CHECK(it->is_string(), "[sft] {}\"{}\" must be a string, got {}", what, key,
              it->type_name());
  return it->get<std::string>();
}

std::vector<ChatMessage> parse_chat_form(const json& messages) {
  ANVIL_CHECK(messages.is_array(), "[sft] \"messages\" must be an array, got {}",
              messages.type_name());
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& message = messages[i];
    const std::string where = fmt::format("message {}: ", i + 1);
    ANVIL_CHECK(message.is_object(), "[sft] {}not a JSON object", where);
    const std::optional<std::string> role = optional_string(message, "role", where);
    ANVIL_CHECK(role.has_value(), "[sft] {}missing \"role\"", where);
    ANVIL_CHECK(*role == "system" || *role == "user" || *role == "assistant",
                "[sft] {}unknown role \"{}\" (expected system, user or assistant)", where, *role);
    ANVIL_CHECK(*role != "system" || i == 0, "[sft] {}a system message must come first", where);
    const std::optional<std::string> content = optional_string(message, "content", where);
    ANVIL_CHECK(content.has_value(), "[sft] {}missing \"content\"", where);
    out.push_back({*role, *content});
  }
  return out;
}

std::vector<ChatMessage> parse_alpaca_form(const json& record) {
  const std::optional<std::string> instruction = optional_string(record, "instruction", "");
  ANVIL_CHECK(instruction.has_value(), "[sft] alpaca record without \"instruction\"");
  const std::optional<std::string> output = optional_string(record, "output", "");
  ANVIL_CHECK(output.has_value(), "[sft] alpaca record without \"output\" (no assistant turn)");
  const std::string input = optional_string(record, "input", "").value_or("");
  const std::optional<std::string> system = optional_string(record, "system", "");
  std::vector<ChatMessage> out;
  if (system && !system->empty()) out.push_back({"system", *system});
  out.push_back({"user", input.empty() ? *instruction : *instruction + "\n\n" + input});
  out.push_back({"assistant", *output});
  return out;
}

}  // namespace

std::vector<ChatMessage> parse_sft_record(std::string_view line) {
  json record;
  try {
    record = json::parse(line);
  } catch (const json::exception& e) {
    ANVIL_FAIL("[sft] invalid JSON: {}", e.what());
  }
  ANVIL_CHECK(record.is_object(), "[sft] record is a JSON {}, not an object", record.type_name());
  std::vector<ChatMessage> messages;
  if (record.contains("messages")) {
    messages = parse_chat_form(record["messages"]);
  } else if (record.contains("instruction") || record.contains("output")) {
    messages = parse_alpaca_form(record);
  } else {
    ANVIL_FAIL(
        "[sft] record has neither \"messages\" (chat form) nor \"instruction\"/\"output\" "
        "(alpaca form)");
  }
  bool has_assistant = false;
  for (size_t i = 0; i < messages.size(); ++i) {
    if (messages[i].role != "assistant") continue;
    has_assistant = true;
    ANVIL_CHECK(!is_blank(messages[i].content), "[sft] message {}: empty assistant content",
                i + 1);
  }
  ANVIL_CHECK(has_assistant, "[sft] no assistant turn");
  return messages;
}

SftRecordReader::SftRecordReader(const std::string& path, uint64_t max_record_bytes)
    : lines_(path, max_record_bytes) {
  ANVIL_CHECK(!lines_.starts_with_json_array(), "[sft] {}", json_array_refusal(path));
}

SftRecordReader::Next SftRecordReader::next(SftRecord& record, SftBadRecord& bad) {
  while (true) {
    const LineReader::Read read = lines_.next(line_);
    ANVIL_CHECK(lines_.error().empty(), "[sft] {}:{}: {}", lines_.path(),
                std::max<uint64_t>(lines_.lines(), 1), lines_.error());
    if (read == LineReader::Read::end) return Next::end;
    if (read == LineReader::Read::too_long) {
      bad = {lines_.lines(),
             fmt::format("the record at {} is longer than --max-record-bytes {}",
                         lines_.describe_offset(lines_.line_offset()),
                         describe_record_bound(lines_.max_line_bytes()))};
      return Next::bad;
    }
    if (is_blank(line_)) continue;
    try {
      record.messages = parse_sft_record(line_);
      record.file = lines_.path();
      record.line = lines_.lines();
      return Next::record;
    } catch (const Error& e) {
      std::string_view reason = e.what();
      if (reason.starts_with("[sft] ")) reason.remove_prefix(6);
      bad = {lines_.lines(), std::string(reason)};
      return Next::bad;
    }
  }
}

SftFileRecords read_sft_file(const std::string& path, uint64_t max_record_bytes) {
  SftRecordReader reader(path, max_record_bytes);
  SftFileRecords out;
  SftRecord record;
  SftBadRecord bad;
  while (true) {
    const SftRecordReader::Next next = reader.next(record, bad);
    if (next == SftRecordReader::Next::end) break;
    if (next == SftRecordReader::Next::record) {
      out.records.push_back(std::move(record));
    } else {
      out.bad.push_back(std::move(bad));
    }
  }
  return out;
}

std::vector<SftRecord> read_sft_records(const std::string& path, bool skip_bad_records,
                                        uint64_t* skipped, uint64_t max_record_bytes) {
  SftFileRecords file = read_sft_file(path, max_record_bytes);
  for (const SftBadRecord& bad : file.bad) {
    ANVIL_CHECK(skip_bad_records, "[sft] {}:{}: {}", path, bad.line, bad.reason);
    log_warn("[sft] {}:{}: {} (record skipped)", path, bad.line, bad.reason);
    if (skipped != nullptr) *skipped += 1;
  }
  return std::move(file.records);
}

}  // namespace anvil
