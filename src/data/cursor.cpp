// DataCursor serialisation and the batch layout arithmetic (see cursor.h for the contract).
#include "data/cursor.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/json_util.h"

namespace anvil {
namespace {

const nlohmann::json& field(const nlohmann::json& json, const char* name) {
  ANVIL_CHECK(json.is_object(), "[data] cursor must be a JSON object");
  const auto it = json.find(name);
  ANVIL_CHECK(it != json.end(), "[data] cursor: missing field '{}'", name);
  return *it;
}

template <typename T>
T integer_field(const nlohmann::json& json, const char* name) {
  return json_integer<T>(field(json, name), fmt::format("[data] cursor: field '{}'", name));
}

std::string string_field(const nlohmann::json& json, const char* name) {
  const nlohmann::json& value = field(json, name);
  ANVIL_CHECK(value.is_string(), "[data] cursor: field '{}' must be a string", name);
  return value.get<std::string>();
}

}  // namespace

nlohmann::json DataCursor::to_json() const {
  nlohmann::json json = {{"next_sample", next_sample},
                         {"seed", seed},
                         {"seq_len", seq_len},
                         {"split", split},
                         {"tokenizer_fingerprint", tokenizer_fingerprint}};
  if (!mixture.empty()) json["mixture"] = mixture;
  return json;
}

DataCursor DataCursor::from_json(const nlohmann::json& json) {
  DataCursor cursor;
  cursor.next_sample = integer_field<int64_t>(json, "next_sample");
  ANVIL_CHECK(cursor.next_sample >= 0, "[data] cursor: next_sample is negative");
  cursor.seed = integer_field<uint64_t>(json, "seed");
  cursor.seq_len = integer_field<int>(json, "seq_len");
  cursor.split = string_field(json, "split");
  cursor.tokenizer_fingerprint = string_field(json, "tokenizer_fingerprint");
  if (json.contains("mixture")) cursor.mixture = string_field(json, "mixture");
  return cursor;
}

void DataCursor::check_resumable_with(const DataCursor& current) const {
  ANVIL_CHECK(seed == current.seed, "[data] saved data seed {} differs from the configured {}",
              seed, current.seed);
  ANVIL_CHECK(seq_len == current.seq_len, "[data] saved seq_len {} differs from the configured {}",
              seq_len, current.seq_len);
  ANVIL_CHECK(split == current.split, "[data] saved split '{}' differs from the configured '{}'",
              split, current.split);
  ANVIL_CHECK(tokenizer_fingerprint == current.tokenizer_fingerprint,
              "[data] saved data was tokenized with tokenizer {} but the dataset now uses {}",
              tokenizer_fingerprint, current.tokenizer_fingerprint);
  const auto describe = [](const std::string& mix) {
    return mix.empty() ? std::string("one dataset (data.path)") : "the mixture " + mix;
  };
  ANVIL_CHECK(mixture == current.mixture,
              "[data] the checkpoint was trained on {} but data.sources now gives {}; resume "
              "with the same sources and weights (or start a new run)",
              describe(mixture), describe(current.mixture));
}

int64_t BatchLayout::global_batch() const {
  ANVIL_CHECK(micro_batch >= 1 && grad_accum >= 1 && world_size >= 1,
              "[data] batch layout needs positive micro_batch, grad_accum and world_size (got "
              "{}, {}, {})",
              micro_batch, grad_accum, world_size);
  return static_cast<int64_t>(micro_batch) * grad_accum * world_size;
}

int64_t BatchLayout::first_sample(int64_t step, int micro_step, int rank) const {
  const int64_t per_step = global_batch();
  ANVIL_CHECK(step >= 0, "[data] step must not be negative, got {}", step);
  ANVIL_CHECK(micro_step >= 0 && micro_step < grad_accum, "[data] micro-step {} outside [0, {})",
              micro_step, grad_accum);
  ANVIL_CHECK(rank >= 0 && rank < world_size, "[data] rank {} outside [0, {})", rank, world_size);
  return step * per_step + (static_cast<int64_t>(micro_step) * world_size + rank) * micro_batch;
}

}  // namespace anvil
