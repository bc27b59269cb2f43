// Helpers of the LoRA model tests: LoRA options for every target, batches with next-token
// targets, adapter gradients and random non-zero adapters (PEFT's B = 0 start hides B's path).
#pragma once

#include <string>
#include <vector>

#include "model/llama.h"
#include "model/random.h"
#include "model_test_util.h"

namespace anvil::test {

// Returns LoRA options adapting all seven projections.
inline LoraOptions all_targets_lora(int r = 4, float alpha = 8.0f, float dropout = 0.0f) {
  LoraOptions lora;
  lora.r = r;
  lora.alpha = alpha;
  lora.dropout = dropout;
  lora.targets = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"};
  return lora;
}

// Host tokens and next-token targets (last position ignored) of a (B, T) batch.
struct HostBatch {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  int batch = 0;
  int seq = 0;

  static HostBatch from_tokens(std::vector<int32_t> tokens, int batch, int seq) {
    HostBatch h;
    h.tokens = std::move(tokens);
    h.batch = batch;
    h.seq = seq;
    h.targets.assign(h.tokens.size(), kIgnoreIndex);
    for (int b = 0; b < batch; ++b)
      for (int t = 0; t + 1 < seq; ++t)
        h.targets[static_cast<size_t>(b) * seq + t] =
            h.tokens[static_cast<size_t>(b) * seq + t + 1];
    return h;
  }
  Batch view() {
    Batch batch_view;
    batch_view.tokens = host_view(tokens, DType::i32, Shape{batch, seq});
    batch_view.targets = host_view(targets, DType::i32, Shape{batch, seq});
    return batch_view;
  }
};

// Returns every trainable gradient of a model concatenated.
inline std::vector<float> trainable_gradients(LlamaModel& model) {
  std::vector<float> out;
  ParameterSet& grads = model.trainable_gradients();
  for (int g = 0; g < grads.group_count(); ++g) {
    const std::vector<float> group = to_host(model.backend(), grads.group(g));
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

// Sets every adapter tensor to normal(0, stddev) values from (seed, name).
inline void randomize_adapters(LlamaModel& model, uint64_t seed, double stddev) {
  ParameterSet& set = model.trainable();
  for (size_t i = 0; i < set.layout().params().size(); ++i) {
    const ParameterInfo& info = set.layout().params()[i];
    std::vector<float> host(static_cast<size_t>(info.numel()));
    fill_normal(host.data(), info.numel(), stddev, seed, fnv1a64(info.name));
    model.backend().copy_from_host(set.tensor(static_cast<int>(i)), host.data());
  }
}

// Returns the (B, T, V) logits of host tokens.
inline std::vector<float> logits_of(LlamaModel& model, HostBatch& batch) {
  std::vector<float> logits(static_cast<size_t>(batch.batch) * batch.seq *
                            model.config().vocab_size);
  Tensor tokens = host_view(batch.tokens, DType::i32, Shape{batch.batch, batch.seq});
  Tensor out = host_view(logits, DType::f32,
                         Shape{batch.batch, batch.seq, model.config().vocab_size});
  model.forward_logits(tokens, out);
  return logits;
}

inline double max_abs_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::fabs(double{a[i]} - b[i]));
  return err;
}

}  // namespace anvil::test
