// MixtureSource implementation: the greedy largest-deficit walk over the global sample index,
// with snapshots of the per-source counts so a resumed run (or a rank reading far ahead)
// reaches any sample without replaying the whole stream more than once.
#include "data/mixture.h"

#include <cmath>

#include "core/error.h"

namespace anvil {
namespace {

// Samples between two snapshots of the walk's counts.
constexpr int64_t kSnapshotEvery = 4096;

// The scale that normalised weights are rounded to: q_k = round(w_k / sum(w) * 2^32).
constexpr double kQuotaScale = 4294967296.0;

}  // namespace

MixtureSource::MixtureSource(std::vector<MixtureComponent> components)
    : components_(std::move(components)) {
  ANVIL_CHECK(!components_.empty(), "[data] a mixture needs at least one source");
  double sum = 0;
  for (const MixtureComponent& c : components_) {
    ANVIL_CHECK(c.source != nullptr, "[data] mixture source '{}' has no data", c.name);
    ANVIL_CHECK(std::isfinite(c.weight) && c.weight > 0,
                "[data] mixture source '{}' has weight {}; weights must be positive numbers",
                c.name, c.weight);
    ANVIL_CHECK(c.samples_per_epoch >= 0, "[data] mixture source '{}' has a negative epoch size",
                c.name);
    sum += c.weight;
  }
  const MixtureComponent& first = components_.front();
  for (const MixtureComponent& c : components_) {
    ANVIL_CHECK(c.source->vocab_size() == first.source->vocab_size(),
                "[data] mixture sources '{}' and '{}' have different vocabularies ({} and {} "
                "tokens); prepare them with the same tokenizer",
                first.name, c.name, first.source->vocab_size(), c.source->vocab_size());
    ANVIL_CHECK(c.source->seq_len() == first.source->seq_len(),
                "[data] mixture sources '{}' and '{}' have different seq_len ({} and {})",
                first.name, c.name, first.source->seq_len(), c.source->seq_len());
    const double quota = std::round(c.weight / sum * kQuotaScale);
    ANVIL_CHECK(quota >= 1,
                "[data] mixture source '{}' has weight {}, too small next to the total {} to "
                "ever be drawn",
                c.name, c.weight, sum);
    quota_.push_back(static_cast<int64_t>(quota));
    quota_sum_ += quota_.back();
    weights_.push_back(c.weight / sum);
  }
  drawn_.assign(components_.size(), 0);
  snapshots_.push_back(drawn_);
}

int MixtureSource::pick() const {
  // deficit_k = q_k * (i + 1) - Q * drawn_k; exact in 128 bits for any 63-bit sample index.
  int best = 0;
  __int128 best_deficit = 0;
  for (size_t k = 0; k < components_.size(); ++k) {
    const __int128 deficit = static_cast<__int128>(quota_[k]) * (next_sample_ + 1) -
                             static_cast<__int128>(quota_sum_) * drawn_[k];
    if (k == 0 || deficit > best_deficit) {
      best = static_cast<int>(k);
      best_deficit = deficit;
    }
  }
  return best;
}

void MixtureSource::seek(int64_t sample) {
  ANVIL_CHECK(sample >= 0, "[data] sample index must not be negative, got {}", sample);
  const int64_t snapshot =
      std::min<int64_t>(sample / kSnapshotEvery, static_cast<int64_t>(snapshots_.size()) - 1);
  if (sample < next_sample_ || snapshot * kSnapshotEvery > next_sample_) {
    next_sample_ = snapshot * kSnapshotEvery;
    drawn_ = snapshots_[static_cast<size_t>(snapshot)];
  }
  while (next_sample_ < sample) {
    ++drawn_[static_cast<size_t>(pick())];
    ++next_sample_;
    if (next_sample_ % kSnapshotEvery == 0 &&
        next_sample_ / kSnapshotEvery == static_cast<int64_t>(snapshots_.size())) {
      snapshots_.push_back(drawn_);
    }
  }
}

std::pair<int, int64_t> MixtureSource::locate(int64_t sample) {
  seek(sample);
  const int k = pick();
  return {k, drawn_[static_cast<size_t>(k)]};
}

std::vector<int64_t> MixtureSource::drawn_before(int64_t n) {
  seek(n);
  return drawn_;
}

std::vector<int64_t> MixtureSource::epochs_completed(int64_t n) {
  std::vector<int64_t> epochs = drawn_before(n);
  for (size_t k = 0; k < epochs.size(); ++k) {
    const int64_t per_epoch = components_[k].samples_per_epoch;
    epochs[k] = per_epoch > 0 ? epochs[k] / per_epoch : 0;
  }
  return epochs;
}

void MixtureSource::fill(int64_t first_sample, int count, const Tensor& tokens,
                         const Tensor& targets, const Tensor* doc_ids, const Tensor* loss_mask) {
  check_fill_tensors(count, seq_len(), tokens, targets, doc_ids, loss_mask);
  ANVIL_CHECK(first_sample >= 0, "[data] first sample must not be negative, got {}", first_sample);
  for (int r = 0; r < count; ++r) {
    const auto [k, index] = locate(first_sample + r);
    const Tensor row_doc_ids = doc_ids != nullptr ? doc_ids->slice(r, r + 1) : Tensor();
    const Tensor row_loss_mask = loss_mask != nullptr ? loss_mask->slice(r, r + 1) : Tensor();
    components_[static_cast<size_t>(k)].source->fill(
        index, 1, tokens.slice(r, r + 1), targets.slice(r, r + 1),
        doc_ids != nullptr ? &row_doc_ids : nullptr,
        loss_mask != nullptr ? &row_loss_mask : nullptr);
  }
}

}  // namespace anvil
