// Strict JSON reading for files anvil must not trust blindly (safetensors headers, shard
// indexes, checkpoint manifests). nlohmann::json silently keeps the last of two equal keys,
// which would let a file say two things at once; this parser rejects duplicates and bounds the
// nesting depth (and so the memory a hostile file can make the parser allocate).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace anvil {

// Parses `text`, throwing anvil::Error "<subject> is not valid JSON (...)", "<subject> has
// duplicate <top_level_noun> 'k'", "<subject> has duplicate key 'k' in 'outer'" or "<subject>
// nests deeper than N levels". `subject` names the file and part, e.g. "[safetensors] f: header".
// `max_depth` is the deepest container level allowed (the root object is level 0).
nlohmann::json parse_json_strict(std::string_view text, const std::string& subject,
                                 int max_depth, std::string_view top_level_noun = "key");

// Returns text cut to a readable length with control characters replaced, for error messages.
std::string quote_for_message(std::string_view text);

}  // namespace anvil
