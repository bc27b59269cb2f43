// Opening training and validation data. Synthetic data draws training samples from the seed
// and validation samples from a different, fixed derivation of it, so evaluation never scores
// a sample the model trained on. Real data is validated against the model before any step.
// A mixture (data.sources) opens one shuffled loader per source, source k with the seed
// hash_triple(seed, "mix", k), and scores each source's validation split on its own.
#include "train/data_sources.h"

#include <fmt/format.h>

#include <algorithm>
#include <filesystem>

#include "core/error.h"
#include "data/dataloader.h"
#include "data/random.h"
#include "data/shard_format.h"
#include "data/synthetic.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

// Seed offset for synthetic validation samples ("val" in ASCII).
constexpr uint64_t kSyntheticValStream = 0x76616c;
// Seed offset for the sample order of mixture sources ("mix" in ASCII).
constexpr uint64_t kMixtureStream = 0x6d6978;

void check_dataset_folder(const std::string& dir) {
  const auto first_part = std::filesystem::path(dir) / shard_file_name("train", 0);
  // A dataset written in parts (anvil prepare --part) has its shards in part folders beside
  // meta.json; the loader checks those.
  ANVIL_CHECK(std::filesystem::exists(first_part) ||
                  std::filesystem::exists(std::filesystem::path(dir) / "meta.json"),
              "[train] no training data in '{}' (expected {}); create it with: {}  "
              "(or train on random tokens with --data.synthetic=true)",
              dir, first_part.string(), prepare_command_for(dir));
}

// Opens `dir`'s training split checked against the model and data.tokenizer.
std::unique_ptr<DataLoader> open_train_split(const TrainConfig& config, const std::string& dir,
                                             uint64_t seed) {
  check_dataset_folder(dir);
  auto train = std::make_unique<DataLoader>(dir, "train",
                                            static_cast<int>(config.training.seq_len), seed, true);
  ANVIL_CHECK(train->vocab_size() <= config.model.vocab_size,
              "[train] the data in '{}' uses a {}-token vocabulary but model.vocab_size is {}; "
              "set --model.vocab_size={} (or more)",
              dir, train->vocab_size(), config.model.vocab_size, train->vocab_size());
  if (!config.data.tokenizer.empty()) {
    const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(config.data.tokenizer);
    ANVIL_CHECK(tokenizer->fingerprint() == train->tokenizer_fingerprint(),
                "[train] data.tokenizer {} (fingerprint {}) is not the tokenizer the data in "
                "'{}' was prepared with (fingerprint {})",
                config.data.tokenizer, tokenizer->fingerprint(), dir,
                train->tokenizer_fingerprint());
  }
  return train;
}

// Opens `dir`'s validation split for sequential scoring.
std::unique_ptr<DataLoader> open_val_split(const TrainConfig& config, const std::string& dir) {
  try {
    return std::make_unique<DataLoader>(dir, config.data.val_split,
                                        static_cast<int>(config.training.seq_len),
                                        static_cast<uint64_t>(config.training.seed), false);
  } catch (const Error& e) {
    ANVIL_FAIL(
        "{} (evaluation needs the '{}' split; set --training.eval_steps=0 to train "
        "without it)",
        e.what(), config.data.val_split);
  }
}

TrainingData open_mixture(const TrainConfig& config, TrainingData data) {
  const auto seed = static_cast<uint64_t>(config.training.seed);
  const int64_t eval_samples_wanted = config.training.eval_steps * eval_batch_size(config);
  const std::vector<DataSourceSpec>& sources = config.data.sources;
  std::vector<MixtureComponent> components;
  std::string first_fingerprint;
  for (size_t k = 0; k < sources.size(); ++k) {
    auto train = open_train_split(config, sources[k].path,
                                  data::hash_triple(seed, kMixtureStream, k));
    if (k == 0) first_fingerprint = train->tokenizer_fingerprint();
    ANVIL_CHECK(train->tokenizer_fingerprint() == first_fingerprint,
                "[train] data.sources '{}' and '{}' were prepared with different tokenizers "
                "(fingerprints {} and {}); a mixture needs one tokenizer",
                sources[0].path, sources[k].path, first_fingerprint,
                train->tokenizer_fingerprint());
    const int64_t windows = train->windows_per_epoch();
    components.push_back({sources[k].path, sources[k].weight, std::move(train), windows});
  }
  auto mixture = std::make_unique<MixtureSource>(std::move(components));
  const std::vector<double> weights = mixture->normalised_weights();
  data.stream.split = "train";
  data.stream.tokenizer_fingerprint = first_fingerprint;
  data.description = fmt::format("mixture of {} sources:", sources.size());
  for (size_t k = 0; k < sources.size(); ++k) {
    const auto& loader = static_cast<const DataLoader&>(*mixture->component(static_cast<int>(k)).source);
    data.stream.mixture += fmt::format("{}{} {}", k ? "; " : "", sources[k].path, weights[k]);
    data.description += fmt::format("{} '{}' weight {:.4g} ({} tokens, {} windows per epoch)",
                                    k ? "," : "", sources[k].path, weights[k],
                                    loader.token_count(), loader.windows_per_epoch());
  }
  if (eval_samples_wanted > 0) {
    for (size_t k = 0; k < sources.size(); ++k) {
      std::unique_ptr<DataLoader> val = open_val_split(config, sources[k].path);
      const int64_t samples = std::min<int64_t>(eval_samples_wanted, val->eval_windows());
      data.val_sources.push_back({sources[k].path, weights[k], std::move(val), samples});
    }
    data.description += fmt::format("; validation '{}' of each source", config.data.val_split);
  }
  data.mixture = mixture.get();
  data.train = std::move(mixture);
  return data;
}

}  // namespace

int64_t eval_batch_size(const TrainConfig& config) {
  return config.eval.batch_size > 0 ? config.eval.batch_size : config.training.batch_size;
}

std::string prepare_command_for(const std::string& dir) {
  return fmt::format(
      "anvil tokenizer train --input <text files> --vocab-size 4096 --out tokenizer.json && "
      "anvil prepare --input <text files> --tokenizer tokenizer.json --out {}",
      dir);
}

TrainingData open_training_data(const TrainConfig& config) {
  const int seq_len = static_cast<int>(config.training.seq_len);
  const auto seed = static_cast<uint64_t>(config.training.seed);
  const int64_t eval_samples_wanted = config.training.eval_steps * eval_batch_size(config);
  TrainingData data;
  data.stream.seed = seed;
  data.stream.seq_len = seq_len;
  if (config.data.synthetic) {
    const auto vocab = static_cast<int32_t>(config.model.vocab_size);
    data.train = std::make_unique<SyntheticData>(vocab, seq_len, seed);
    if (eval_samples_wanted > 0) {
      data.val = std::make_unique<SyntheticData>(vocab, seq_len,
                                                 data::hash_pair(seed, kSyntheticValStream));
      data.val_samples = eval_samples_wanted;
    }
    data.stream.split = "synthetic";
    data.description = fmt::format("synthetic random tokens (vocab {}, seed {})", vocab, seed);
    return data;
  }

  if (!config.data.sources.empty()) return open_mixture(config, std::move(data));
  auto train = open_train_split(config, config.data.path, seed);
  data.stream.split = "train";
  data.stream.tokenizer_fingerprint = train->tokenizer_fingerprint();
  data.description =
      fmt::format("'{}': {} training tokens, {} windows of {} per epoch", config.data.path,
                  train->token_count(), train->windows_per_epoch(), seq_len);
  if (eval_samples_wanted > 0) {
    std::unique_ptr<DataLoader> val = open_val_split(config, config.data.path);
    data.val_samples = std::min<int64_t>(eval_samples_wanted, val->eval_windows());
    data.description +=
        fmt::format("; validation '{}': {} windows", config.data.val_split, data.val_samples);
    data.val = std::move(val);
  }
  data.train = std::move(train);
  return data;
}

}  // namespace anvil
