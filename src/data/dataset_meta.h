// Pieces of a prepared dataset's meta.json that plain (`anvil prepare`) and SFT
// (`anvil prepare --sft`) datasets share, so both describe their tokenizer the same way and
// the dataloader and trainer can check a dataset against the tokenizer they are given.
#pragma once

#include <nlohmann/json.hpp>

namespace anvil {

class Tokenizer;

// Returns the "tokenizer" object of meta.json: path, fingerprint, vocab size, BOS/EOS ids
// (null when the tokenizer has none) and whether documents start with BOS.
nlohmann::ordered_json tokenizer_meta_json(const Tokenizer& tokenizer, bool adds_bos);

}  // namespace anvil
