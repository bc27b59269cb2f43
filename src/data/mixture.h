// MixtureSource: training samples drawn from several sources in proportion to their weights,
// as Megatron's blended datasets do. Weights are normalised and rounded to integers q_k on a
// 2^32 scale (Q = sum q_k), so the choice below is exact integer arithmetic on every machine.
// Global sample i goes to the source k with the largest q_k * (i + 1) - Q * drawn_k(i), ties
// to the lowest k, where drawn_k(i) counts the samples of [0, i) that source k supplied; it is
// that source's sample number drawn_k(i). After any n samples each source has supplied within
// one sample of its share n * q_k / Q. Sample i's data is a function of the sources and i
// alone (never the world size or the batch layout), so resume and reshard stay exact.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/sample_source.h"

namespace anvil {

struct MixtureComponent {
  std::string name;  // how the source is reported: its path as written in the config
  double weight = 0;  // > 0, relative to the other components' weights
  std::unique_ptr<SampleSource> source;
  int64_t samples_per_epoch = 0;  // samples in one pass over the source; 0: no epochs
};

class MixtureSource : public SampleSource {
 public:
  // Takes the components (at least one); throws when a weight is not a positive finite number,
  // is too small next to the others to be drawn, or the components' vocab or seq_len differ.
  explicit MixtureSource(std::vector<MixtureComponent> components);

  void fill(int64_t first_sample, int count, const Tensor& tokens, const Tensor& targets,
            const Tensor* doc_ids, const Tensor* loss_mask) override;
  int32_t vocab_size() const override { return components_.front().source->vocab_size(); }
  int seq_len() const override { return components_.front().source->seq_len(); }

  // Returns the (component, sample within it) that global sample `sample` reads.
  std::pair<int, int64_t> locate(int64_t sample);
  // Returns how many of the global samples [0, n) each component supplied.
  std::vector<int64_t> drawn_before(int64_t n);
  // Returns each component's completed passes after global samples [0, n) (0 for a component
  // without epochs).
  std::vector<int64_t> epochs_completed(int64_t n);
  // Returns each component's weight divided by the sum of the weights (q_k / Q up to 2^-32).
  const std::vector<double>& normalised_weights() const { return weights_; }
  int size() const { return static_cast<int>(components_.size()); }
  const MixtureComponent& component(int k) const { return components_[static_cast<size_t>(k)]; }

 private:
  // Moves the walk so that next_sample_ == sample, from the nearest snapshot at or before it.
  void seek(int64_t sample);
  // Returns the component the walk's next sample goes to.
  int pick() const;

  std::vector<MixtureComponent> components_;
  std::vector<double> weights_;  // w_k / sum(w)
  std::vector<int64_t> quota_;  // q_k
  int64_t quota_sum_ = 0;       // Q
  // The walk: drawn_[k] = drawn_k(next_sample_). snapshots_[s] holds drawn_ at sample
  // s * kSnapshotEvery, so any sample is reached in at most kSnapshotEvery steps once seen.
  int64_t next_sample_ = 0;
  std::vector<int64_t> drawn_;
  std::vector<std::vector<int64_t>> snapshots_;
};

}  // namespace anvil
