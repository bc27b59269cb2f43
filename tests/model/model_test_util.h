// Helpers shared by the model tests: small configs, host copies of device tensors, and error
// metrics. Everything here reads through the backend so the tests also hold for device backends.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "model/llama.h"

namespace anvil::test {

// Returns a small GQA config (4 query heads, 2 kv heads) that runs in milliseconds.
inline LlamaConfig tiny_config() {
  LlamaConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 48;
  c.vocab_size = 64;
  c.max_seq_len = 32;
  c.rope_theta = 10000.0f;
  return c;
}

// Returns a copy of a backend tensor's f32 values.
inline std::vector<float> to_host(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  backend.copy_to_host(out.data(), t);
  return out;
}

// Returns max |a - b| / max(max |b|, tiny): the error of a relative to the scale of b.
inline double relative_max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double err = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  return err / std::max(scale, 1e-30);
}

// Returns whether two f32 vectors hold the same bits.
inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Returns every gradient group of a model concatenated (for bitwise comparisons).
inline std::vector<float> all_gradients(LlamaModel& model) {
  std::vector<float> out;
  for (int g = 0; g < model.gradients().group_count(); ++g) {
    const std::vector<float> group = to_host(model.backend(), model.gradients().group(g));
    out.insert(out.end(), group.begin(), group.end());
  }
  return out;
}

// Copies every parameter of `from` into `to` (same layout).
inline void copy_parameters(LlamaModel& from, LlamaModel& to) {
  for (int g = 0; g < from.parameters().group_count(); ++g) {
    to.backend().copy(to.parameters().group(g), from.parameters().group(g));
  }
}

// Returns (B, T) i32 token ids drawn deterministically from a simple LCG.
inline std::vector<int32_t> make_tokens(int batch, int seq, int vocab, uint32_t seed) {
  std::vector<int32_t> out(static_cast<size_t>(batch) * seq);
  uint32_t state = seed * 2654435761u + 1u;
  for (int32_t& t : out) {
    state = state * 1664525u + 1013904223u;
    t = static_cast<int32_t>((state >> 8) % static_cast<uint32_t>(vocab));
  }
  return out;
}

// Returns a host tensor view over a vector with shape (B, T).
template <typename T>
Tensor host_view(std::vector<T>& data, DType dtype, Shape shape) {
  return Tensor(data.data(), dtype, shape);
}

}  // namespace anvil::test
