// Byte-level BPE training (`anvil tokenizer train`). Text is split with the GPT-4 / Llama 3
// (cl100k) pattern, distinct words are counted in parallel, and merges are learned with
// incremental pair counts: each merge touches only the words that contain its pair. The result
// is a Hugging Face tokenizer.json (byte-level vocab strings, [a, b] merges, Split + ByteLevel
// pre-tokenizer, ByteLevel decoder, special tokens as added tokens after the vocab) that the HF
// `tokenizers` library loads and encodes exactly as anvil does.
// Determinism: the output depends only on the texts and options, never on the thread count:
// texts are cut into blocks at fixed newline positions, words are ordered by their bytes, and
// ties between equally frequent pairs go to the smaller (left id, right id).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace anvil {

struct BpeTrainOptions {
  int32_t vocab_size = 32000;  // every id: the 256 byte tokens, the merges and the specials
  std::vector<std::string> special_tokens = {"<|endoftext|>"};
  int threads = 0;  // 0: the configured anvil thread count
  // Receives progress lines (counting, then merges); may be empty.
  std::function<void(const std::string&)> progress;
};

struct BpeTrainStats {
  uint64_t bytes = 0;         // input bytes
  uint64_t words = 0;         // pre-tokens counted
  uint64_t unique_words = 0;  // distinct pre-tokens
  int32_t merges = 0;         // merges learned
  int32_t vocab_size = 0;     // ids in the result (may fall short when the text runs out)
};

// Trains a byte-level BPE on `texts`; returns the tokenizer.json text. Throws anvil::Error for
// a vocab size that cannot hold the 256 byte tokens and the specials, or a malformed special.
std::string train_bpe_tokenizer(const std::vector<std::string_view>& texts,
                                const BpeTrainOptions& options, BpeTrainStats* stats = nullptr);

}  // namespace anvil
