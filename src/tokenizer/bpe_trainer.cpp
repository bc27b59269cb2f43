// Byte-level BPE training: parallel word counting, incremental merge learning, JSON output.
#include "tokenizer/bpe_trainer.h"

#include <omp.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/threading.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/loaders.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/utf8.h"

namespace anvil {
namespace {

using tok::StringIdMap;
using tok::U64Map;

constexpr size_t kBlockBytes = size_t{1} << 20;

// Distinct words with their counts.
struct WordCounter {
  StringIdMap index;
  std::vector<std::string> words;
  std::vector<uint64_t> counts;
  uint64_t total = 0;

  void add(std::string_view word, uint64_t count) {
    total += count;
    if (auto found = index.find(word)) {
      counts[*found] += count;
      return;
    }
    index.insert(word, static_cast<int32_t>(words.size()));
    words.emplace_back(word);
    counts.push_back(count);
  }
};

// Cuts texts into blocks of about kBlockBytes that end after a newline (or at the text's end).
std::vector<std::string_view> cut_blocks(const std::vector<std::string_view>& texts) {
  std::vector<std::string_view> blocks;
  for (std::string_view text : texts) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t end = std::min(pos + kBlockBytes, text.size());
      if (end < text.size()) {
        const size_t newline = text.find('\n', end);
        end = newline == std::string_view::npos ? text.size() : newline + 1;
      }
      blocks.push_back(text.substr(pos, end - pos));
      pos = end;
    }
  }
  return blocks;
}

// Splits a block the way the trained tokenizer will encode it: special tokens removed,
// invalid bytes as words of their own, the rest split by the cl100k pattern.
void count_block(std::string_view block, const tok::AddedTokenMatcher& specials,
                 const tok::PreTokenizer& splitter, WordCounter& counter) {
  auto count_valid = [&](std::string_view run) {
    splitter.split(tok::Piece{run, false}, [&](tok::Piece piece) { counter.add(piece.text, 1); });
  };
  auto count_segment = [&](std::string_view text) {
    size_t run_start = 0;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t length = tok::utf8_char_length(text, pos);
      if (length != 0) {
        pos += length;
        continue;
      }
      if (pos > run_start) count_valid(text.substr(run_start, pos - run_start));
      counter.add(text.substr(pos, 1), 1);
      run_start = ++pos;
    }
    if (pos > run_start) count_valid(text.substr(run_start, pos - run_start));
  };
  specials.split(
      block, [&](size_t begin, size_t end) { count_segment(block.substr(begin, end - begin)); },
      [](int32_t) {});
}

WordCounter count_words(const std::vector<std::string_view>& texts,
                        const std::vector<std::string>& special_tokens, int threads,
                        const std::function<void(const std::string&)>& progress) {
  std::vector<tok::AddedToken> tokens;
  for (size_t i = 0; i < special_tokens.size(); ++i)
    tokens.push_back({special_tokens[i], static_cast<int32_t>(i), true});
  const tok::AddedTokenMatcher specials(tokens, special_tokens);
  const auto splitter = tok::make_isolating_split(tok::kLlama3Pattern, "tokenizer train");
  const std::vector<std::string_view> blocks = cut_blocks(texts);

  std::vector<WordCounter> local(static_cast<size_t>(threads));
  size_t done = 0;
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (size_t i = 0; i < blocks.size(); ++i) {
    count_block(blocks[i], specials, *splitter, local[static_cast<size_t>(omp_get_thread_num())]);
#pragma omp critical(anvil_train_progress)
    if (progress && (++done % 16 == 0 || done == blocks.size()))
      progress(fmt::format("counted {}/{} blocks of text", done, blocks.size()));
  }
  WordCounter all = std::move(local[0]);
  for (size_t t = 1; t < local.size(); ++t)
    for (size_t w = 0; w < local[t].words.size(); ++w)
      all.add(local[t].words[w], local[t].counts[w]);
  return all;
}

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
}

struct Candidate {
  uint64_t count;
  uint64_t pair;
  // Lower priority: fewer occurrences, then the larger (left, right).
  bool operator<(const Candidate& other) const {
    return count != other.count ? count < other.count : pair > other.pair;
  }
};

// Words as symbol runs in one flat array; merges rewrite them in place.
class MergeLearner {
 public:
  explicit MergeLearner(const WordCounter& counter) {
    std::vector<uint32_t> order(counter.words.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return counter.words[a] < counter.words[b]; });
    for (uint32_t source : order) {
      offsets_.push_back(symbols_.size());
      lengths_.push_back(static_cast<uint32_t>(counter.words[source].size()));
      counts_.push_back(counter.counts[source]);
      for (unsigned char byte : counter.words[source]) symbols_.push_back(byte);
    }
    for (int b = 0; b < 256; ++b) {
      token_bytes_.emplace_back(1, static_cast<char>(b));
      token_ids_.insert(token_bytes_.back(), b);
    }
    for (uint32_t w = 0; w < counts_.size(); ++w) {
      const int32_t* s = &symbols_[offsets_[w]];
      for (uint32_t i = 0; i + 1 < lengths_[w]; ++i)
        add_pair(pair_key(s[i], s[i + 1]), w, counts_[w]);
    }
    pair_counts_.for_each([&](uint64_t pair, uint64_t count) { queue_.push({count, pair}); });
  }

  // Learns merges until `token_limit` tokens exist or no pair is left; reports progress.
  void learn(size_t token_limit, const std::function<void(const std::string&)>& progress) {
    const size_t wanted = token_limit > token_bytes_.size() ? token_limit - token_bytes_.size() : 0;
    size_t next_report = std::max<size_t>(1, wanted / 10);
    while (token_bytes_.size() < token_limit && !queue_.empty()) {
      const Candidate top = queue_.top();
      queue_.pop();
      const uint64_t* current = pair_counts_.find(top.pair);
      const uint64_t count = current ? *current : 0;
      if (count != top.count) {  // stale entry: requeue with today's count
        if (count > 0) queue_.push({count, top.pair});
        continue;
      }
      if (count == 0) break;
      apply_merge(top.pair);
      const size_t learned = token_bytes_.size() - 256;
      if (progress && (learned >= next_report || token_bytes_.size() == token_limit)) {
        progress(fmt::format("merges {}/{}: '{}' x{}", learned, wanted,
                             tok::bytes_to_byte_level(token_bytes_[merged_ids_.back()]), count));
        next_report += std::max<size_t>(1, wanted / 10);
      }
    }
  }

  const std::vector<std::string>& token_bytes() const { return token_bytes_; }
  const std::vector<std::pair<int32_t, int32_t>>& merges() const { return merges_; }

 private:
  void add_pair(uint64_t pair, uint32_t word, uint64_t count) {
    pair_counts_.at_or_insert(pair, 0) += count;
    std::vector<uint32_t>& list = where_[pair];
    if (list.empty() || list.back() != word) list.push_back(word);
  }

  void apply_merge(uint64_t pair) {
    const int32_t left = static_cast<int32_t>(pair >> 32);
    const int32_t right = static_cast<int32_t>(pair & 0xFFFFFFFFu);
    const std::string bytes = token_bytes_[left] + token_bytes_[right];
    int32_t merged = token_ids_.find(bytes).value_or(-1);
    if (merged < 0) {  // a new token; an existing spelling keeps its id, as HF's trainer does
      merged = static_cast<int32_t>(token_bytes_.size());
      token_bytes_.push_back(bytes);
      token_ids_.insert(bytes, merged);
    }
    merges_.emplace_back(left, right);
    merged_ids_.push_back(merged);

    std::vector<uint32_t> words = std::move(where_[pair]);
    where_.erase(pair);
    std::sort(words.begin(), words.end());
    words.erase(std::unique(words.begin(), words.end()), words.end());
    std::vector<uint64_t> touched;
    for (uint32_t w : words) merge_in_word(w, left, right, merged, touched);
    std::sort(touched.begin(), touched.end());
    touched.erase(std::unique(touched.begin(), touched.end()), touched.end());
    for (uint64_t p : touched)
      if (const uint64_t* c = pair_counts_.find(p); c && *c > 0) queue_.push({*c, p});
  }

  // Rewrites one word; pairs around each merge site leave the counts, the new ones join.
  void merge_in_word(uint32_t w, int32_t left, int32_t right, int32_t merged,
                     std::vector<uint64_t>& touched) {
    int32_t* s = &symbols_[offsets_[w]];
    const uint32_t n = lengths_[w];
    const uint64_t count = counts_[w];
    thread_local std::vector<int32_t> out;
    thread_local std::vector<uint8_t> consumed;
    thread_local std::vector<uint8_t> fresh;
    out.clear();
    fresh.clear();
    consumed.assign(n, 0);
    for (uint32_t i = 0; i < n;) {
      if (i + 1 < n && s[i] == left && s[i + 1] == right) {
        consumed[i] = consumed[i + 1] = 1;
        out.push_back(merged);
        fresh.push_back(1);
        i += 2;
      } else {
        out.push_back(s[i]);
        fresh.push_back(0);
        ++i;
      }
    }
    if (out.size() == n) return;  // stale entry: the pair is gone from this word
    for (uint32_t i = 0; i + 1 < n; ++i)
      if (consumed[i] || consumed[i + 1])
        pair_counts_.at_or_insert(pair_key(s[i], s[i + 1]), 0) -= count;
    for (size_t k = 0; k + 1 < out.size(); ++k) {
      if (!fresh[k] && !fresh[k + 1]) continue;
      const uint64_t p = pair_key(out[k], out[k + 1]);
      add_pair(p, w, count);
      touched.push_back(p);
    }
    std::copy(out.begin(), out.end(), s);
    lengths_[w] = static_cast<uint32_t>(out.size());
  }

  std::vector<int32_t> symbols_;
  std::vector<size_t> offsets_;
  std::vector<uint32_t> lengths_;
  std::vector<uint64_t> counts_;
  U64Map pair_counts_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> where_;
  std::priority_queue<Candidate> queue_;
  std::vector<std::string> token_bytes_;
  StringIdMap token_ids_;
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<int32_t> merged_ids_;
};

std::string tokenizer_json(const MergeLearner& learner, const std::vector<std::string>& specials) {
  using ordered = nlohmann::ordered_json;
  const auto& tokens = learner.token_bytes();
  ordered vocab = ordered::object();
  for (size_t id = 0; id < tokens.size(); ++id) vocab[tok::bytes_to_byte_level(tokens[id])] = id;
  ordered merges = ordered::array();
  for (const auto& [left, right] : learner.merges())
    merges.push_back(
        {tok::bytes_to_byte_level(tokens[left]), tok::bytes_to_byte_level(tokens[right])});
  ordered added = ordered::array();
  for (size_t i = 0; i < specials.size(); ++i)
    added.push_back({{"id", tokens.size() + i}, {"content", specials[i]}, {"single_word", false},
                     {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", true}});
  const ordered byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false},
                              {"trim_offsets", true}, {"use_regex", false}};
  ordered root = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", added},
      {"normalizer", nullptr},
      {"pre_tokenizer",
       {{"type", "Sequence"},
        {"pretokenizers",
         {{{"type", "Split"}, {"pattern", {{"Regex", tok::kLlama3Pattern}}},
           {"behavior", "Isolated"}, {"invert", false}},
          byte_level}}}},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model",
       {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
        {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
        {"fuse_unk", false}, {"byte_fallback", false}, {"ignore_merges", false},
        {"vocab", vocab}, {"merges", merges}}}};
  return root.dump(2) + "\n";
}

void check_specials(const std::vector<std::string>& specials) {
  for (size_t i = 0; i < specials.size(); ++i) {
    ANVIL_CHECK(!specials[i].empty() && tok::is_valid_utf8(specials[i]),
                "[tokenizer train] special token {} is empty or not UTF-8", i);
    for (size_t j = 0; j < i; ++j)
      ANVIL_CHECK(specials[i] != specials[j], "[tokenizer train] special token '{}' is repeated",
                  specials[i]);
  }
}

}  // namespace

std::string train_bpe_tokenizer(const std::vector<std::string_view>& texts,
                                const BpeTrainOptions& options, BpeTrainStats* stats) {
  check_specials(options.special_tokens);
  const int64_t minimum = 256 + static_cast<int64_t>(options.special_tokens.size());
  ANVIL_CHECK(options.vocab_size >= minimum,
              "[tokenizer train] --vocab-size {} is too small: 256 byte tokens + {} special "
              "tokens need at least {}",
              options.vocab_size, options.special_tokens.size(), minimum);
  const int threads = options.threads > 0 ? options.threads : num_threads();
  const WordCounter counter = count_words(texts, options.special_tokens, threads, options.progress);
  if (options.progress)
    options.progress(fmt::format("{} words, {} distinct", counter.total, counter.words.size()));

  MergeLearner learner(counter);
  learner.learn(static_cast<size_t>(options.vocab_size) - options.special_tokens.size(),
                options.progress);
  if (stats) {
    stats->bytes = 0;
    for (std::string_view text : texts) stats->bytes += text.size();
    stats->words = counter.total;
    stats->unique_words = counter.words.size();
    stats->merges = static_cast<int32_t>(learner.merges().size());
    stats->vocab_size =
        static_cast<int32_t>(learner.token_bytes().size() + options.special_tokens.size());
  }
  return tokenizer_json(learner, options.special_tokens);
}

}  // namespace anvil
