// The host-side launch planning of the CUDA kernels (backend/cuda/kernel_plan.h), checked
// without a GPU: vector shifts align every array of a call, the packs of a flat range or a
// row cover each element exactly once with only aligned packs marked for 16-byte access,
// row kernels get whole warps, the one-launch RMSNorm backward's grid and workspace, and the
// multi-tensor AdamW's parameter blocks. The AdamW check walks the launches exactly as the
// kernel does (grid-stride threads, forward set search, pack lanes) with the reference's
// per-element update, and must reproduce cpu-ref's adamw_step per set bit for bit.
#include "backend/cuda/kernel_plan.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/buffer.h"

namespace anvil::cuda {
namespace {

alignas(64) unsigned char arena[4096];

const void* at(size_t offset) { return arena + offset; }

TEST(KernelPlan, VectorShiftAlignsEveryArray) {
  EXPECT_EQ(vector_shift({{at(0), 4}, {at(64), 2}}), 0);
  // An f32 view 12 bytes into an aligned buffer: shift 3 puts its element -3 at byte 0.
  EXPECT_EQ(vector_shift({{at(12), 4}}), 3);
  EXPECT_EQ(vector_shift({{at(12), 4}, {at(6), 2}}), 3);  // bf16 at 6 bytes: element -3 at 0
  EXPECT_EQ(vector_shift({{at(4), 4}, {at(4), 2}}), -1);  // f32 needs s=1, bf16 needs s=2
  EXPECT_EQ(vector_shift({{at(2), 4}}), -1);             // not even element-aligned
  EXPECT_EQ(vector_shift({{nullptr, 2}, {at(16), 4}}), 0);  // absent arrays are ignored
}

// Every element of [0, n) lies in exactly one pack's lanes; vector packs are full and their
// first element is 16-byte aligned in every array.
void check_flat_cover(int64_t n, std::initializer_list<AccessedArray> arrays) {
  const FlatPacks packs = plan_flat_packs(n, arrays);
  std::vector<int> seen(static_cast<size_t>(n), 0);
  for (int64_t q = 0; q < packs.count; ++q) {
    const Pack p = flat_pack(packs, q);
    ASSERT_LE(p.lo, p.hi) << "n=" << n << " q=" << q;
    for (int lane = p.lo; lane < p.hi; ++lane) ++seen[static_cast<size_t>(p.first + lane)];
    if (!p.vector) continue;
    EXPECT_EQ(p.hi - p.lo, kPackElements);
    for (const AccessedArray& a : arrays) {
      const uintptr_t address = reinterpret_cast<uintptr_t>(a.data) +
                                static_cast<uintptr_t>(p.first) * a.element_bytes;
      EXPECT_EQ(address % kVectorBytes, 0u) << "n=" << n << " q=" << q;
    }
  }
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "element " << i;
}

TEST(KernelPlan, FlatPacksCoverEachElementOnce) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{8}, int64_t{9},
                          int64_t{100}, int64_t{1001}}) {
    for (size_t offset = 0; offset < 8; ++offset) {
      check_flat_cover(n, {{at(4 * offset), 4}, {at(64 + 4 * offset), 4}});
      check_flat_cover(n, {{at(4 * offset), 4}, {at(2 * offset), 2}});
      check_flat_cover(n, {{at(2 * offset), 2}, {at(128), 2}});  // may be unalignable
    }
  }
  const FlatPacks aligned = plan_flat_packs(64, {{at(0), 4}, {at(32), 2}});
  EXPECT_TRUE(aligned.vectorized);
  EXPECT_EQ(aligned.count, 8);
  const FlatPacks shifted = plan_flat_packs(64, {{at(12), 4}});
  EXPECT_TRUE(shifted.vectorized);
  EXPECT_EQ(shifted.shift, 3);
  EXPECT_EQ(shifted.count, 9);  // a head of 5 elements, 7 full packs, a tail of 3
  EXPECT_FALSE(plan_flat_packs(64, {{at(4), 4}, {at(4), 2}}).vectorized);
}

TEST(KernelPlan, RowPacksAndThreads) {
  EXPECT_TRUE(rows_vectorized(2048, {{at(0), 4}, {at(256), 2}}));
  EXPECT_FALSE(rows_vectorized(2052, {{at(0), 4}}));  // rows would start mid-vector
  EXPECT_FALSE(rows_vectorized(2048, {{at(8), 4}}));
  EXPECT_TRUE(rows_vectorized(16, {{at(0), 4}, {nullptr, 2}}));
  // Row packs: full ones vector when the rows are, the last one partial.
  const Pack last = row_pack(3 * 37, 37, 4, true);
  EXPECT_EQ(last.first, 3 * 37 + 32);
  EXPECT_EQ(last.hi, 5);
  EXPECT_FALSE(last.vector);
  EXPECT_TRUE(row_pack(0, 2048, 255, true).vector);
  EXPECT_EQ(row_block_threads(2048), 256);
  EXPECT_EQ(row_block_threads(37), 32);
  EXPECT_EQ(row_block_threads(2050), 288);       // 257 packs: nine warps
  EXPECT_EQ(row_block_threads(128256), 1024);    // the 1.5B vocabulary: capped
  EXPECT_EQ(row_block_threads(8192, 256), 256);  // a smaller cap
}

TEST(KernelPlan, RmsnormBackwardGridAndWorkspace) {
  const RmsnormBackwardPlan plan = plan_rmsnorm_backward(8192, 2048, 132);
  EXPECT_EQ(plan.threads, 256);
  EXPECT_EQ(plan.blocks, 132 * 4);
  EXPECT_EQ(plan.groups, (132 * 4 + kRmsnormGroupBlocks - 1) / kRmsnormGroupBlocks);
  EXPECT_EQ(plan.partial_floats, plan.blocks * 2048);
  EXPECT_EQ(plan.group_floats, plan.groups * 2048);
  EXPECT_EQ(plan.workspace_bytes(), static_cast<size_t>(plan.blocks + plan.groups) * 2048 * 4);
  const RmsnormBackwardPlan few_rows = plan_rmsnorm_backward(3, 515, 132);
  EXPECT_EQ(few_rows.blocks, 3);  // never more blocks than rows
  EXPECT_EQ(few_rows.groups, 1);
  EXPECT_EQ(plan_rmsnorm_backward(100000, 8192, 132).threads, 1024);
  EXPECT_EQ(plan_rmsnorm_backward(100000, 8192, 132).blocks, 132);
}

// The host form of the kernel's per-element update (cpu/reference/adamw.cpp's order).
void update(const AdamWScalars& s, float decay, float& param, float grad, float& m, float& v) {
  const float g = grad * s.grad_scale;
  float p = param * decay;
  const float mi = m * s.beta1 + g * s.one_minus_beta1;
  const float vi = v * s.beta2 + (s.one_minus_beta2 * g) * g;
  const float denom = std::sqrt(vi) / s.bias_correction2_sqrt + s.eps;
  p = p + (s.neg_step_size * mi) / denom;
  m = mi, v = vi, param = p;
}

// Walks one launch as the kernel does (grid-stride threads, forward set search, pack lanes).
void emulate(const AdamWLaunch& launch, int64_t threads, std::vector<int>& touched,
             const std::vector<float*>& bases) {
  for (int64_t thread = 0; thread < threads; ++thread) {
    int set = 0;
    for (int64_t q = thread; q < launch.total_packs; q += threads) {
      set = advance_set(launch, set, q);
      const AdamWSetDescriptor& d = launch.sets[set];
      ASSERT_GE(q, d.first_pack);
      const Pack p = flat_pack(set_packs(d), q - d.first_pack);
      for (int lane = p.lo; lane < p.hi; ++lane) {
        const int64_t i = p.first + lane;
        update(launch.scalars, d.decay, d.param[i], d.grad[i], d.m[i], d.v[i]);
        if (d.copy) static_cast<float*>(d.copy)[i] = d.param[i];
        ++touched[static_cast<size_t>(d.param - bases[0] + i)];
      }
    }
  }
}

TEST(KernelPlan, MultiTensorAdamWLaunchesEqualOneStepPerSet) {
  // 100 sets (three launches), sizes from 0 to 300, views at odd offsets of shared buffers.
  const int sets = 100;
  std::vector<int64_t> sizes, offsets;
  int64_t total = 0;
  for (int s = 0; s < sets; ++s) {
    sizes.push_back(s % 10 == 0 ? 0 : (s * 37) % 301);
    offsets.push_back(total + s % 5);  // gaps make views start mid-vector
    total += sizes.back() + s % 5;
  }
  auto cpu = make_backend("cpu-ref");
  auto filled = [&](float lo, float step) {
    std::vector<float> v(static_cast<size_t>(total));
    for (int64_t i = 0; i < total; ++i) v[i] = lo + step * static_cast<float>(i % 97);
    return v;
  };
  std::vector<float> param = filled(-0.5f, 0.01f), grad = filled(-0.3f, 0.007f);
  std::vector<float> m = filled(-0.05f, 0.001f), v = filled(0.0f, 0.0009f);
  std::vector<float> copy(static_cast<size_t>(total), 0.0f);
  std::vector<float> ref_param = param, ref_m = m, ref_v = v;
  auto view = [&](std::vector<float>& data, int s) {
    return Tensor(data.data() + offsets[s], DType::f32, Shape{sizes[s]});
  };
  AdamWParams params;
  params.lr = 3e-3f, params.grad_scale = 0.5f, params.step = 4;
  std::vector<AdamWTensors> many;
  for (int s = 0; s < sets; ++s) {
    AdamWTensors set{view(param, s), view(grad, s), view(m, s), view(v, s),
                     s % 3 == 0 ? view(copy, s) : Tensor(), s % 2 == 0 ? 0.1f : 0.0f};
    many.push_back(set);
    AdamWParams one = params;
    one.weight_decay = set.weight_decay;
    cpu->adamw_step(view(ref_param, s), view(grad, s), view(ref_m, s), view(ref_v, s), one,
                    nullptr);
  }
  const std::vector<AdamWLaunch> launches = plan_adamw_launches(many, params);
  int non_empty = 0;
  for (int s = 0; s < sets; ++s) non_empty += sizes[s] > 0;
  ASSERT_EQ(launches.size(), static_cast<size_t>((non_empty + kAdamWSetsPerLaunch - 1) /
                                                 kAdamWSetsPerLaunch));
  std::vector<int> touched(static_cast<size_t>(total), 0);
  for (const AdamWLaunch& launch : launches) {
    EXPECT_GT(launch.set_count, 0);
    EXPECT_LE(launch.set_count, kAdamWSetsPerLaunch);
    emulate(launch, 7, touched, {param.data()});  // 7 threads: every stride crosses sets
  }
  for (int s = 0; s < sets; ++s) {
    for (int64_t i = offsets[s]; i < offsets[s] + sizes[s]; ++i) {
      ASSERT_EQ(touched[i], 1) << "set " << s << " element " << i - offsets[s];
      ASSERT_EQ(std::memcmp(&param[i], &ref_param[i], 4), 0) << "set " << s;
      ASSERT_EQ(std::memcmp(&m[i], &ref_m[i], 4), 0) << "set " << s;
      ASSERT_EQ(std::memcmp(&v[i], &ref_v[i], 4), 0) << "set " << s;
      if (s % 3 == 0) {
        ASSERT_EQ(copy[i], param[i]) << "set " << s;
      }
    }
  }
  // The per-set fields: decay from the set's own weight decay, copies and their dtypes.
  const AdamWSetDescriptor& first = launches[0].sets[0];
  EXPECT_EQ(first.decay, adamw_scalars(params, 0.0f).decay);
  EXPECT_EQ(launches[0].sets[1].decay, adamw_scalars(params, 0.1f).decay);
  EXPECT_EQ(first.copy, nullptr);
}

TEST(KernelPlan, AdamWOfOnlyEmptySetsLaunchesNothing) {
  std::vector<float> none;
  const Tensor empty(none.data(), DType::f32, Shape{0});
  const std::vector<AdamWTensors> sets(3, AdamWTensors{empty, empty, empty, empty, Tensor(), 0});
  EXPECT_TRUE(plan_adamw_launches(sets, AdamWParams{}).empty());
}

}  // namespace
}  // namespace anvil::cuda
