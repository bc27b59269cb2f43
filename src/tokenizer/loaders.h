// Loaders that turn a tokenizer file into BpeTokenizerParts: Hugging Face tokenizer.json and
// Meta's tiktoken-format tokenizer.model. Tokenizer::load (loader.cpp) picks one by content.
#pragma once

#include <string>

#include "tokenizer/bpe_tokenizer.h"

namespace anvil::tok {

// Builds a tokenizer from the text of a tokenizer.json file at `path`.
BpeTokenizerParts load_hf_json(const std::string& path, const std::string& content);
// Builds a Llama 3 tokenizer from the text of a tiktoken-format file at `path`.
BpeTokenizerParts load_tiktoken(const std::string& path, const std::string& content);

// The Llama 3 pre-tokenizer pattern (identical to tiktoken's cl100k_base).
inline constexpr const char* kLlama3Pattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

}  // namespace anvil::tok
