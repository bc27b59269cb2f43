// Strict JSON parsing: a parser callback tracks the keys of every open object and the depth.
#include "io/json_util.h"

#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "core/checked_number.h"
#include "core/error.h"

namespace anvil {
namespace {

using nlohmann::json;

// Bounds the text quoted from a file so messages stay one readable line.
constexpr size_t kMaxQuotedChars = 240;

class StrictJsonGuard {
 public:
  StrictJsonGuard(const std::string& subject, int max_depth, std::string_view top_level_noun)
      : subject_(subject), max_depth_(max_depth), top_level_noun_(top_level_noun) {}

  bool operator()(int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        ANVIL_CHECK(depth <= max_depth_, "{} nests deeper than {} levels{}", subject_,
                    max_depth_ + 1, context());
        if (event == json::parse_event_t::object_start) open_.push_back({});
        break;
      case json::parse_event_t::object_end:
        open_.pop_back();
        break;
      case json::parse_event_t::key: {
        std::string key = parsed.get<std::string>();
        if (open_.size() == 1) {
          ANVIL_CHECK(open_.back().keys.insert(key).second, "{} has duplicate {} '{}'", subject_,
                      top_level_noun_, quote_for_message(key));
        } else {
          ANVIL_CHECK(open_.back().keys.insert(key).second, "{} has duplicate key '{}'{}",
                      subject_, quote_for_message(key), context());
        }
        open_.back().last_key = std::move(key);
        break;
      }
      default:
        break;
    }
    return true;
  }

 private:
  struct OpenObject {
    std::set<std::string> keys;
    std::string last_key;
  };

  // Returns " in 'outer'" naming the top-level key being parsed, or "" at the top level.
  std::string context() const {
    if (open_.empty() || open_.front().last_key.empty()) return "";
    return fmt::format(" in '{}'", quote_for_message(open_.front().last_key));
  }

  const std::string& subject_;
  int max_depth_;
  std::string_view top_level_noun_;
  std::vector<OpenObject> open_;
};

}  // namespace

std::string quote_for_message(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, kMaxQuotedChars)) {
    const auto byte = static_cast<unsigned char>(c);
    out += (byte < 0x20 || byte == 0x7f) ? '?' : c;
  }
  if (text.size() > kMaxQuotedChars) out += "...";
  return out;
}

namespace {

// Returns whether a JSON value is an integer literal too long for 64 bits, which nlohmann::json
// keeps as a double (a whole number of magnitude 2^63 or more).
bool is_huge_integer(const json& value) {
  if (!value.is_number_float()) return false;
  const double number = value.get<double>();
  return std::isfinite(number) && std::floor(number) == number && std::fabs(number) >= 0x1p63;
}

}  // namespace

int64_t json_signed(const json& value, std::string_view subject, int64_t lo, int64_t hi) {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    ANVIL_CHECK(hi >= 0 && number <= static_cast<uint64_t>(hi), "{} is out of range: {}", subject,
                number);
    return static_cast<int64_t>(number);
  }
  if (value.is_number_integer()) {
    const int64_t number = value.get<int64_t>();
    return checked_integer(number, lo, hi, subject, std::to_string(number));
  }
  ANVIL_CHECK(!is_huge_integer(value), "{} is out of range: {}", subject, value.dump());
  ANVIL_FAIL("{} must be an integer, got {}", subject, quote_for_message(value.dump()));
}

double json_real(const json& value, std::string_view subject) {
  ANVIL_CHECK(value.is_number(), "{} must be a number, got {}", subject,
              quote_for_message(value.dump()));
  return checked_real(value.get<double>(), subject, value.dump());
}

uint64_t json_unsigned(const json& value, std::string_view subject, uint64_t hi) {
  if (value.is_number_unsigned()) {
    const uint64_t number = value.get<uint64_t>();
    ANVIL_CHECK(number <= hi, "{} is out of range: {}", subject, number);
    return number;
  }
  if (value.is_number_integer()) {
    const int64_t number = value.get<int64_t>();
    ANVIL_CHECK(number >= 0 && static_cast<uint64_t>(number) <= hi, "{} is out of range: {}",
                subject, number);
    return static_cast<uint64_t>(number);
  }
  ANVIL_CHECK(!is_huge_integer(value), "{} is out of range: {}", subject, value.dump());
  ANVIL_FAIL("{} must be an integer, got {}", subject, quote_for_message(value.dump()));
}

json parse_json_strict(std::string_view text, const std::string& subject, int max_depth,
                       std::string_view top_level_noun) {
  StrictJsonGuard guard(subject, max_depth, top_level_noun);
  try {
    return json::parse(text.begin(), text.end(), std::ref(guard));
  } catch (const json::exception& e) {
    ANVIL_FAIL("{} is not valid JSON ({})", subject, quote_for_message(e.what()));
  }
}

}  // namespace anvil
