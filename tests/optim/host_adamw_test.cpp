// HostAdamW against AdamW::step on a CPU backend: groups submitted in order and collected
// one by one give the same bits as a whole step, over several steps with decay spans and a
// gradient scale; its buffers are counted on its own host backend by category; misuse is an
// error.
#include "optim/host_adamw.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "core/error.h"

namespace anvil {
namespace {

std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> out(static_cast<size_t>(n));
  uint32_t state = seed * 2654435761u + 1u;
  for (float& x : out) {
    state = state * 1664525u + 1013904223u;
    x = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
  }
  return out;
}

TEST(HostAdamW, GroupByGroupEqualsAWholeStepBitwise) {
  const std::vector<int64_t> sizes = {96, 33, 257};
  std::vector<HostGroupSpec> specs;
  for (const int64_t n : sizes) {
    HostGroupSpec spec;
    spec.numel = n;
    spec.spans = {{0, n / 2, true}, {n / 2, n - n / 2, false}};
    specs.push_back(spec);
  }
  AdamWHyperParams hyper;
  hyper.weight_decay = 0.1;
  HostAdamW host(specs, hyper);

  // The reference: plain AdamW on its own CPU backend, same values.
  std::unique_ptr<Backend> cpu = make_backend("cpu");
  std::vector<Buffer> params, grads;
  std::vector<OptimizerGroup> groups;
  for (size_t g = 0; g < sizes.size(); ++g) {
    const int64_t n = sizes[g];
    params.emplace_back(*cpu, static_cast<size_t>(n) * 4, MemoryCategory::trainable_weights);
    grads.emplace_back(*cpu, static_cast<size_t>(n) * 4, MemoryCategory::gradients);
    OptimizerGroup group;
    group.params = params.back().as(DType::f32, Shape{n});
    group.grads = grads.back().as(DType::f32, Shape{n});
    group.spans = specs[g].spans;
    const std::vector<float> init = values(n, static_cast<uint32_t>(g));
    std::memcpy(group.params.f32(), init.data(), init.size() * 4);
    std::memcpy(host.master(static_cast<int>(g)).f32(), init.data(), init.size() * 4);
    groups.push_back(group);
  }
  AdamW reference(*cpu, groups, hyper);

  for (int step = 1; step <= 3; ++step) {
    const double lr = 1e-2 * step, scale = 0.5 / step;
    for (size_t g = 0; g < sizes.size(); ++g) {
      const std::vector<float> grad = values(sizes[g], static_cast<uint32_t>(100 * step + g));
      std::memcpy(groups[g].grads.f32(), grad.data(), grad.size() * 4);
      std::memcpy(host.gradient(static_cast<int>(g)).f32(), grad.data(), grad.size() * 4);
    }
    reference.step(lr, scale);
    host.begin_step(lr, scale);
    for (int g = 0; g < host.group_count(); ++g) host.submit(g);
    for (int g = host.group_count() - 1; g >= 0; --g) host.wait(g);  // any order of collection
    EXPECT_EQ(host.step_count(), step);
    for (size_t g = 0; g < sizes.size(); ++g) {
      EXPECT_EQ(std::memcmp(host.master(static_cast<int>(g)).f32(), groups[g].params.f32(),
                            static_cast<size_t>(sizes[g]) * 4),
                0)
          << "step " << step << " group " << g;
    }
  }
  const std::vector<NamedTensor> mine = host.state_tensors();
  const std::vector<NamedTensor> theirs = reference.state_tensors();
  ASSERT_EQ(mine.size(), theirs.size());
  for (size_t i = 0; i < mine.size(); ++i) {
    EXPECT_EQ(mine[i].name, theirs[i].name);
    EXPECT_TRUE(mine[i].tensor.device.is_cpu());
    EXPECT_EQ(std::memcmp(mine[i].tensor.f32(), theirs[i].tensor.f32(), mine[i].tensor.nbytes()),
              0)
        << mine[i].name;
  }
}

TEST(HostAdamW, CountsItsBuffersOnItsHostBackend) {
  HostAdamW host({{64, {{0, 64, true}}}, {32, {{0, 32, false}}}}, AdamWHyperParams{});
  const MemorySnapshot memory = host.backend().memory_snapshot();
  EXPECT_EQ(memory.current_of(MemoryCategory::trainable_weights), 96 * 4);
  EXPECT_EQ(memory.current_of(MemoryCategory::gradients), 96 * 4);
  EXPECT_EQ(memory.current_of(MemoryCategory::optimizer_state), 2 * 96 * 4);
}

TEST(HostAdamW, RejectsAnEmptyGroupAndAnUnknownOne) {
  EXPECT_THROW(HostAdamW({{0, {}}}, AdamWHyperParams{}), Error);
  HostAdamW host({{16, {{0, 16, true}}}}, AdamWHyperParams{});
  host.begin_step(1e-3, 1.0);
  EXPECT_THROW(host.submit(1), Error);
  host.submit(0);
  host.wait_all();
  EXPECT_EQ(host.step_count(), 1);
}

}  // namespace
}  // namespace anvil
