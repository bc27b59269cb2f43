// The launch planning of kernel_plan.h: pure host arithmetic on addresses and sizes (no CUDA
// call), so tests/backend_cuda/kernel_plan_test.cpp checks it on any machine. The AdamW
// scalars come from op_rules.h, the same function every backend's AdamW uses.
#include "backend/cuda/kernel_plan.h"

#include <algorithm>

#include "core/error.h"

namespace anvil::cuda {

int vector_shift(std::initializer_list<AccessedArray> arrays) {
  for (int shift = 0; shift < kPackElements; ++shift) {
    bool aligned = true;
    for (const AccessedArray& a : arrays) {
      if (!a.data) continue;
      // Unsigned arithmetic: the address of element -shift, modulo 16.
      const uintptr_t start = reinterpret_cast<uintptr_t>(a.data) -
                              static_cast<uintptr_t>(shift) * a.element_bytes;
      aligned = aligned && start % kVectorBytes == 0;
    }
    if (aligned) return shift;
  }
  return -1;
}

FlatPacks plan_flat_packs(int64_t n, std::initializer_list<AccessedArray> arrays) {
  FlatPacks packs;
  packs.n = n;
  const int shift = vector_shift(arrays);
  packs.vectorized = shift >= 0;
  packs.shift = shift >= 0 ? shift : 0;
  packs.count = (n + packs.shift + kPackElements - 1) / kPackElements;
  return packs;
}

bool rows_vectorized(int64_t cols, std::initializer_list<AccessedArray> arrays) {
  if (cols % kPackElements != 0) return false;
  for (const AccessedArray& a : arrays)
    if (a.data && reinterpret_cast<uintptr_t>(a.data) % kVectorBytes != 0) return false;
  return true;
}

int row_block_threads(int64_t cols, int max_threads) {
  const int64_t packs = (cols + kPackElements - 1) / kPackElements;
  const int64_t warps = (packs + 31) / 32;
  return static_cast<int>(std::clamp<int64_t>(warps * 32, 32, max_threads));
}

RmsnormBackwardPlan plan_rmsnorm_backward(int64_t rows, int64_t cols, int sm_count) {
  RmsnormBackwardPlan plan;
  plan.threads = row_block_threads(cols);
  const int64_t per_sm = std::max(1, kRmsnormThreadsPerSm / plan.threads);
  const int64_t blocks = std::min<int64_t>(rows, std::max(1, sm_count) * per_sm);
  plan.blocks = static_cast<int>(std::max<int64_t>(1, blocks));
  plan.groups = (plan.blocks + kRmsnormGroupBlocks - 1) / kRmsnormGroupBlocks;
  ANVIL_CHECK(plan.groups + 1 <= kRmsnormMaxCounters,
              "[cuda] rmsnorm_backward: {} block groups exceed the {} counters", plan.groups,
              kRmsnormMaxCounters - 1);
  plan.partial_floats = plan.blocks * cols;
  plan.group_floats = plan.groups * cols;
  return plan;
}

std::vector<AdamWLaunch> plan_adamw_launches(std::span<const AdamWTensors> sets,
                                             const AdamWParams& params) {
  std::vector<AdamWLaunch> launches;
  const AdamWScalars shared = adamw_scalars(params, 0.0f);
  for (const AdamWTensors& set : sets) {
    const int64_t n = set.param.numel();
    if (n == 0) continue;
    if (launches.empty() || launches.back().set_count == kAdamWSetsPerLaunch) {
      AdamWLaunch launch{};
      launch.scalars = shared;
      launches.push_back(launch);
    }
    AdamWLaunch& launch = launches.back();
    const bool has_copy = set.param_copy.defined();
    AdamWSetDescriptor& d = launch.sets[launch.set_count++];
    d.param = set.param.f32();
    d.grad = set.grad.f32();
    d.m = set.m.f32();
    d.v = set.v.f32();
    d.copy = has_copy ? set.param_copy.data : nullptr;
    d.copy_dtype = has_copy ? set.param_copy.dtype : DType::f32;
    d.n = n;
    d.decay = adamw_scalars(params, set.weight_decay).decay;
    const FlatPacks packs = plan_flat_packs(
        n, {{d.param, 4}, {d.grad, 4}, {d.m, 4}, {d.v, 4}, {d.copy, dtype_size(d.copy_dtype)}});
    d.shift = packs.vectorized ? packs.shift : -1;
    d.first_pack = launch.total_packs;
    launch.total_packs += packs.count;
  }
  return launches;
}

}  // namespace anvil::cuda
