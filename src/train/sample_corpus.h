// The demo's sample corpus: the Debian fortunes (package `fortunes`, one fortune per document,
// separated by '%' lines). When a run asks for the default data folder and it does not exist
// yet, `anvil train` builds it in place of the two commands a user would otherwise run:
// `anvil tokenizer train` (a byte-level BPE of model.vocab_size ids on the corpus text) and
// `anvil prepare` (shards split 8:1:1 by document), through the tokenizer and data APIs.
#pragma once

#include <string>

namespace anvil {

// The data folder the defaults (the tiny preset) train on.
inline constexpr const char* kSampleCorpusDataPath = "data/fortunes";
// Where Debian installs the fortunes text.
inline constexpr const char* kFortunesSourceDir = "/usr/share/games/fortunes";

// Returns the tokenizer.json path the sample corpus uses for a data folder
// ("<dir>-tokenizer.json").
std::string sample_corpus_tokenizer_path(const std::string& data_path);

// Returns true when `data_path` is the sample corpus folder and it is not prepared yet.
bool sample_corpus_needs_preparing(const std::string& data_path);

// Trains the tokenizer (vocab_size ids) and prepares the shards into `data_path`; prints
// progress lines. Throws naming the package to install when the fortunes are missing.
void prepare_sample_corpus(const std::string& data_path, int vocab_size);

}  // namespace anvil
