// The engine's norm part (see gradient_norm.h).
#include "parallel/gradient_norm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "parallel/collectives.h"
#include "parallel/slot_pool.h"

namespace anvil {

GradientNorm::GradientNorm(Backend& device, Communicator& world, const ShardPlan& plan,
                           const ParameterLayout& layout, int tp_index, const Buffer& step_results,
                           int micro_batches, bool offloaded)
    : backend_(&device),
      world_(&world),
      plan_(&plan),
      norm_ranges_(norm_ranges(layout, tp_index)),
      step_results_(&step_results),
      micro_batches_(micro_batches),
      offloaded_(offloaded) {}

std::vector<std::vector<GradientNorm::ElementRange>> GradientNorm::norm_ranges(
    const ParameterLayout& layout, int tp_index) {
  std::vector<std::vector<ElementRange>> ranges(static_cast<size_t>(layout.group_count()));
  if (tp_index == 0) {
    for (int g = 0; g < layout.group_count(); ++g)
      ranges[static_cast<size_t>(g)].push_back(ElementRange{0, layout.group_numel(g)});
    return ranges;
  }
  // Tp rank 0 counts the replicated parameters; padding holds zeros and may be skipped.
  for (const ParameterInfo& p : layout.params()) {
    if (p.split_dim >= 0) ranges[static_cast<size_t>(p.group)].push_back({p.offset, p.numel()});
  }
  return ranges;
}

Tensor GradientNorm::loss_sum_slot(int micro_step) const {
  return buffer_view(*step_results_, DType::u32, static_cast<size_t>(micro_step) * sizeof(double),
                     2);
}

Tensor GradientNorm::norm_counters() const {
  const size_t offset = static_cast<size_t>(micro_batches_) * sizeof(double);
  return buffer_view(*step_results_, DType::u32, offset, 2 * kExactCounterCount);
}

GradientNorm::StepResults GradientNorm::read_step_results() {
  const int64_t bytes = static_cast<int64_t>(step_results_->bytes());
  std::vector<uint64_t> words(static_cast<size_t>(bytes) / sizeof(uint64_t));
  backend_->copy_to_host(words.data(), buffer_view(*step_results_, DType::u32, 0, bytes / 4));
  StepResults results;
  results.loss_sums.resize(static_cast<size_t>(micro_batches_));
  std::memcpy(results.loss_sums.data(), words.data(), results.loss_sums.size() * sizeof(double));
  if (!offloaded_) {
    std::copy_n(words.begin() + micro_batches_, kExactCounterCount, results.counters.begin());
  }
  return results;
}

void GradientNorm::add_device_squares(const Tensor& values, ExactSquareSum& sum) {
  Backend& backend = *backend_;
  for (int64_t done = 0; done < values.numel();) {
    if (norm_counter_fill_ == kExactCounterCapacity) {  // full: fold them, start again
      fold_norm_counters(sum);
      backend.fill_zero(norm_counters());
      norm_counter_fill_ = 0;
    }
    const int64_t count =
        std::min(values.numel() - done, kExactCounterCapacity - norm_counter_fill_);
    backend.accumulate_exact_squares(values.flat(done, count), norm_counters());
    norm_counter_fill_ += count;
    done += count;
  }
}

void GradientNorm::fold_norm_counters(ExactSquareSum& sum) {
  ExactSquareSum::DigitCounters counters;
  backend_->copy_to_host(counters.data(), norm_counters());
  sum.add_digit_counters(counters);
}

void GradientNorm::add_local_squares(ExactSquareSum& local,
                                     const std::function<Tensor(int)>& reduced_slice) {
  // This rank's squares: on the device into the digit counters, which reach the host with the
  // step's results (a few dozen words, not the gradient); offloaded, from the host
  // optimizer's copies.
  if (!offloaded_) {
    backend_->fill_zero(norm_counters());
    norm_counter_fill_ = 0;
  }
  for (int g = 0; g < plan_->group_count(); ++g) {
    const GroupShard& s = plan_->group(g);
    if (s.slice_length == 0) continue;  // this rank's slice is all padding
    const Tensor slice = reduced_slice(g);
    for (const ElementRange& range : norm_ranges_[static_cast<size_t>(g)]) {
      const int64_t lo = std::max(range.begin, s.slice_begin);
      const int64_t hi = std::min(range.begin + range.length, s.slice_begin + s.slice_length);
      if (lo >= hi) continue;
      const Tensor part = slice.flat(lo - s.slice_begin, hi - lo);
      if (offloaded_) {
        local.add_squares(part.f32(), part.numel());
      } else {
        add_device_squares(part, local);
      }
    }
  }
}

double GradientNorm::global_grad_norm(const ExactSquareSum& local) {
  const ExactSquareSum::Words words = local.to_words();
  const std::vector<uint64_t> all = all_gather_words(*world_, words);
  ExactSquareSum total;
  for (size_t r = 0; r < all.size() / words.size(); ++r) {
    ExactSquareSum::Words rank_words;
    std::copy_n(all.begin() + static_cast<std::ptrdiff_t>(r * words.size()), words.size(),
                rank_words.begin());
    total.add(ExactSquareSum::from_words(rank_words));
  }
  return std::sqrt(total.value());
}

}  // namespace anvil
