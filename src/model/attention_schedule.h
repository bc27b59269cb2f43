// The attention mask of each layer of a model: one rule (sliding window, sparse segment
// pattern, sink keys) for every layer, except that every dense_every-th layer (layers
// dense_every - 1, 2 dense_every - 1, ...) attends densely. Causal and document masks apply to
// every layer. It is a training choice, not part of the Hugging Face architecture: an exported
// model carries no trace of it (docs/long-context.md).
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace anvil {

struct AttentionSchedule {
  int window = 0;
  SparsePattern pattern = SparsePattern::dense;
  int segment = 0;
  int stride = 0;
  int sinks = 0;
  int dense_every = 0;  // 0: every layer uses the rule

  // Returns whether layer `layer` ignores the rule and attends densely.
  bool layer_is_dense(int layer) const {
    return dense_every > 0 && (layer + 1) % dense_every == 0;
  }
  // Returns whether some layer attends to fewer than all earlier positions.
  bool sparse() const { return window > 0 || pattern != SparsePattern::dense; }
  // Returns the visible (query, key) pairs of layer `layer` on a causal sequence of `seq_len`
  // positions (documents aside) over the dense causal count seq_len (seq_len + 1) / 2: the
  // share of attention work the layer's mask leaves.
  double visible_fraction(int layer, int64_t seq_len) const;
  // Returns visible_fraction averaged over n_layers layers.
  double mean_visible_fraction(int n_layers, int64_t seq_len) const;
  // Sets the window, pattern and sink fields of `params` for layer `layer`.
  void apply(int layer, AttentionParams& params) const {
    if (layer_is_dense(layer)) return;
    params.window = window;
    params.pattern = pattern;
    params.segment = segment;
    params.stride = stride;
    params.sinks = sinks;
  }
};

}  // namespace anvil
