// GradientNorm: the engine's norm part, and the one readback of a step. Each micro-step's
// loss sum is written on the device into the step's results (RankState::step_results); after
// the reductions the squares of this rank's reduced gradient slice are added into exact digit
// counters beside them (on the device; offloaded, from the host optimizer's copies on the
// host), and the host reads both back with a single copy. The global norm is the exact sum of
// every rank's squares (ExactSquareSum), so it is the same on every rank and at every mesh.
// Under tensor parallelism only tp rank 0 counts the replicated parameters.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backend/backend.h"
#include "comm/communicator.h"
#include "core/buffer.h"
#include "core/exact_square_sum.h"
#include "model/parameters.h"
#include "parallel/shard_plan.h"

namespace anvil {

class GradientNorm {
 public:
  GradientNorm() = default;
  // Counts the squares of `plan`'s slices of `layout` (this tp rank's, `tp_index`) on
  // `device` into `step_results` (step_result_bytes(micro_batches, offloaded)); sums them over
  // `world`. All must outlive the norm.
  GradientNorm(Backend& device, Communicator& world, const ShardPlan& plan,
               const ParameterLayout& layout, int tp_index, const Buffer& step_results,
               int micro_batches, bool offloaded);

  // What the host reads back once a step.
  struct StepResults {
    std::vector<double> loss_sums;             // per micro-step
    ExactSquareSum::DigitCounters counters{};  // without offload
  };
  // Returns micro-step m's loss sum on the device (a double as u32 (2)).
  Tensor loss_sum_slot(int micro_step) const;
  // Adds this rank's gradient squares of each group's reduced slice (`reduced_slice(g)`: on
  // the device, queued into the counters and read back with the step's results; offloaded,
  // host memory added into `local` now).
  void add_local_squares(ExactSquareSum& local, const std::function<Tensor(int)>& reduced_slice);
  // Reads the step's results back (one wait on the device).
  StepResults read_step_results();
  // Returns the global gradient norm from every rank's `local` squares (exact, any order).
  double global_grad_norm(const ExactSquareSum& local);

 private:
  // Elements [begin, begin + length) of a group's buffer.
  struct ElementRange {
    int64_t begin = 0;
    int64_t length = 0;
  };
  // Returns, per group, the element ranges whose squares this rank adds to the gradient norm:
  // all of them, except replicated parameters on tp ranks other than 0.
  static std::vector<std::vector<ElementRange>> norm_ranges(const ParameterLayout& layout,
                                                            int tp_index);
  // The gradient norm's digit counters on the device (Backend::accumulate_exact_squares).
  Tensor norm_counters() const;
  // Adds the squares of device tensor `values` to the counters, first folding them into `sum`
  // and zeroing them whenever they hold kExactCounterCapacity squares (over 2^32 gradient
  // elements on one rank).
  void add_device_squares(const Tensor& values, ExactSquareSum& sum);
  // Copies the counters to the host and adds what they hold to `sum`.
  void fold_norm_counters(ExactSquareSum& sum);

  Backend* backend_ = nullptr;
  Communicator* world_ = nullptr;
  const ShardPlan* plan_ = nullptr;
  std::vector<std::vector<ElementRange>> norm_ranges_;
  const Buffer* step_results_ = nullptr;
  int micro_batches_ = 1;
  bool offloaded_ = false;
  int64_t norm_counter_fill_ = 0;  // squares added to the counters since they were zeroed
};

}  // namespace anvil
