// Pieces of a prepared dataset's meta.json that plain (`anvil prepare`) and SFT
// (`anvil prepare --sft`) datasets share, so both describe their tokenizer the same way and
// the dataloader and trainer can check a dataset against the tokenizer they are given.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace anvil {

class Tokenizer;

// Returns the "tokenizer" object of meta.json: path, fingerprint, vocab size, BOS/EOS ids
// (null when the tokenizer has none) and whether documents start with BOS.
nlohmann::ordered_json tokenizer_meta_json(const Tokenizer& tokenizer, bool adds_bos);

// Returns the tokenizer path that the text of meta.json (at `meta_path`) names under
// tokenizer.path; throws anvil::Error "[run] META_PATH: ..." when the text is not valid JSON or
// has no such string.
std::string meta_tokenizer_path(std::string_view text, const std::string& meta_path);

}  // namespace anvil
