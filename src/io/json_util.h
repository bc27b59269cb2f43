// Strict JSON reading for files anvil must not trust blindly (safetensors headers, shard
// indexes, checkpoint manifests). nlohmann::json silently keeps the last of two equal keys,
// which would let a file say two things at once; this parser rejects duplicates and bounds the
// nesting depth (and so the memory a hostile file can make the parser allocate).
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

namespace anvil {

// Parses `text`, throwing anvil::Error "<subject> is not valid JSON (...)", "<subject> has
// duplicate <top_level_noun> 'k'", "<subject> has duplicate key 'k' in 'outer'" or "<subject>
// nests deeper than N levels". `subject` names the file and part, e.g. "[safetensors] f: header".
// `max_depth` is the deepest container level allowed (the root object is level 0).
nlohmann::json parse_json_strict(std::string_view text, const std::string& subject,
                                 int max_depth, std::string_view top_level_noun = "key");

// Returns `value` as an integer in [lo, hi]. Throws anvil::Error "<subject> must be an integer,
// got V" for another JSON value (a fraction, a string) and "<subject> is out of range: V" for an
// integer outside the bounds, V being the number as the file wrote it. An integer literal past
// 64 bits is stored by nlohmann::json as a double and so is reported as out of range too.
int64_t json_signed(const nlohmann::json& value, std::string_view subject, int64_t lo, int64_t hi);
// Returns `value` as an integer in [0, hi]; errors as json_signed.
uint64_t json_unsigned(const nlohmann::json& value, std::string_view subject, uint64_t hi);

// Returns `value` as an integer of type T, never wrapped or truncated (errors as json_signed).
template <typename T>
T json_integer(const nlohmann::json& value, std::string_view subject) {
  static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
  if constexpr (std::is_signed_v<T>) {
    return static_cast<T>(json_signed(value, subject, std::numeric_limits<T>::min(),
                                      std::numeric_limits<T>::max()));
  } else {
    return static_cast<T>(json_unsigned(value, subject, std::numeric_limits<T>::max()));
  }
}

// Returns `value` as a real number within a float's range (checked_real). Throws "<subject> must
// be a number, got V" for another JSON value and "<subject> is out of range: V" past a float.
double json_real(const nlohmann::json& value, std::string_view subject);

// Returns text cut to a readable length with control characters replaced, for error messages.
std::string quote_for_message(std::string_view text);

}  // namespace anvil
