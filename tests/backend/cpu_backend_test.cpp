// The registry, the CPU backend's memory functions and memory counting, and RoPE's inverse
// frequencies checked bit for bit against values PyTorch computed (the op driver checks the
// rest of RoPE).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"
#include "backend/cpu/reference/reference_ops.h"
#include "core/cpu_info.h"
#include "core/error.h"

namespace anvil {
namespace {

TEST(Registry, NamesAndDescriptions) {
  const std::vector<std::string> names = compiled_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu"), names.end());
  EXPECT_NE(std::find(names.begin(), names.end(), "cpu-ref"), names.end());
  EXPECT_EQ(make_backend("cpu")->name(), "cpu");
  EXPECT_EQ(make_backend("cpu-ref")->name(), "cpu-ref");
  try {
    make_backend("tpu");
    FAIL() << "unknown backend accepted";
  } catch (const Error& e) {
    // The message lists exactly what the registry holds.
    EXPECT_NE(std::string(e.what()).find("(choose " + backend_choices() + ")"), std::string::npos)
        << e.what();
    for (const std::string& name : names)
      EXPECT_NE(backend_choices().find(name), std::string::npos) << backend_choices();
  }
  const std::vector<std::string> lines = describe_backends();
  EXPECT_EQ(lines.size(), backend_registry().entries().size());
  const std::string cpu = lines.at(0);
  std::printf("[backend] %s\n", cpu.c_str());
  EXPECT_EQ(cpu.rfind("cpu: ", 0), 0u) << cpu;
  EXPECT_NE(cpu.find(cpu_info().model_name), std::string::npos) << cpu;
  EXPECT_NE(cpu.find(cpu_info().feature_list()), std::string::npos) << cpu;
}

// The backend counts its allocations in its own snapshot (not HostAllocator's), and the
// optimized kernels' scratch is counted as workspace.
TEST(CpuBackend, MemorySnapshotCountsEveryAllocationByCategory) {
  for (const char* name : {"cpu", "cpu-ref"}) {
    std::unique_ptr<Backend> backend = make_backend(name);
    const MemorySnapshot host_before = HostAllocator::instance().memory_snapshot();
    EXPECT_EQ(backend->memory_snapshot().total, 0) << name;
    {
      Buffer weights(*backend, 4096, MemoryCategory::trainable_weights);
      Buffer moments(*backend, 8192, MemoryCategory::optimizer_state);
      const MemorySnapshot s = backend->memory_snapshot();
      EXPECT_EQ(s.current_of(MemoryCategory::trainable_weights), 4096) << name;
      EXPECT_EQ(s.current_of(MemoryCategory::optimizer_state), 8192) << name;
      EXPECT_EQ(s.total, 4096 + 8192) << name;
    }
    EXPECT_EQ(HostAllocator::instance().memory_snapshot().total, host_before.total) << name;

    // Cross-entropy over 4 rows of 100 logits: the optimized backend keeps row scratch.
    Buffer logits(*backend, 400 * sizeof(float), MemoryCategory::workspace);
    Buffer rows(*backend, 4 * sizeof(float), MemoryCategory::workspace);
    std::vector<float> values(400, 0.25f);
    const std::vector<int32_t> targets = {1, 2, 3, 4};
    const Tensor tl = logits.as(DType::f32, Shape{4, 100});
    backend->copy_from_host(tl, values.data());
    const Tensor losses = rows.as(DType::f32, Shape{4});
    const Tensor ids(const_cast<int32_t*>(targets.data()), DType::i32, Shape{4});
    const int64_t before = backend->memory_snapshot().current_of(MemoryCategory::workspace);
    backend->cross_entropy(tl, ids, nullptr, -100, losses, nullptr, 1.0f);
    const int64_t after = backend->memory_snapshot().current_of(MemoryCategory::workspace);
    if (std::string(name) == "cpu") {
      EXPECT_GE(after - before, 100 * static_cast<int64_t>(sizeof(float))) << name;
    } else {
      EXPECT_EQ(after, before) << name;  // the reference loops keep no scratch
    }
  }
  const std::unique_ptr<Backend> backend = make_backend("cpu");
  { Buffer transient(*backend, 1 << 20, MemoryCategory::communication); }
  const MemorySnapshot s = backend->memory_snapshot();
  EXPECT_EQ(s.current_of(MemoryCategory::communication), 0);
  EXPECT_EQ(s.peak_of(MemoryCategory::communication), 1 << 20);
  EXPECT_EQ(s.total_peak, 1 << 20);
}

// The op suite skips a backend's f16 rows when it reports no f16 kernels, so this pins that
// cpu-ref, cpu and sim (which runs cpu's kernels) report them, and still refuse a non-float dtype.
TEST(CpuBackend, EveryCpuBackendAndSimRunF16Activations) {
  for (const char* name : {"cpu-ref", "cpu", "sim"}) {
    const auto backend = make_backend(name);
    EXPECT_TRUE(backend->supports_compute_dtype(DType::f32)) << name;
    EXPECT_TRUE(backend->supports_compute_dtype(DType::bf16)) << name;
    EXPECT_TRUE(backend->supports_compute_dtype(DType::f16)) << name;
    EXPECT_FALSE(backend->supports_compute_dtype(DType::i32)) << name;
  }
}

TEST(Registry, RejectsDuplicatesAndOffersOnlyBuiltEntries) {
  BackendRegistry registry;
  registry.add({"a", [] { return std::string("a: test"); }, [] { return make_cpu_backend(true); }});
  registry.add({"b", [] { return std::string("b: not built"); },
                []() -> std::unique_ptr<Backend> { ANVIL_FAIL("[b] not built"); }, false});
  EXPECT_THROW(registry.add({"a", [] { return std::string(); }, [] { return make_cpu_backend(true); }}),
               Error);
  EXPECT_EQ(registry.built_names(), std::vector<std::string>{"a"});
  ASSERT_NE(registry.find("b"), nullptr);
  EXPECT_THROW(registry.find("b")->create(), Error);
  EXPECT_EQ(registry.find("c"), nullptr);
}

TEST(CpuBackend, MemoryIsAlignedAndCopiesRoundTrip) {
  for (const char* name : {"cpu", "cpu-ref"}) {
    std::unique_ptr<Backend> backend = make_backend(name);
    EXPECT_TRUE(backend->device().is_cpu());
    Buffer a(*backend, 100 * sizeof(float), MemoryCategory::workspace);
    Buffer b(*backend, 100 * sizeof(float), MemoryCategory::workspace);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % 64, 0u);
    const Tensor ta = a.as(DType::f32, Shape{100}), tb = b.as(DType::f32, Shape{100});
    std::vector<float> host(100), back(100, -1.0f);
    for (int i = 0; i < 100; ++i) host[i] = 0.5f * static_cast<float>(i);
    backend->copy_from_host(ta, host.data());
    backend->copy(tb, ta);
    backend->copy_to_host(back.data(), tb);
    backend->synchronize();
    EXPECT_EQ(back, host);
    backend->fill_zero(tb.slice(10, 20));
    backend->copy_to_host(back.data(), tb);
    EXPECT_EQ(back[9], 4.5f);
    EXPECT_EQ(back[10], 0.0f);
    EXPECT_EQ(back[19], 0.0f);
    EXPECT_EQ(back[20], 10.0f);
    EXPECT_THROW(backend->copy(ta.slice(0, 50), tb), Error);
  }
}

// Returns the float with the given bit pattern.
float from_bits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// Bit patterns printed by PyTorch 1.13 (f32 CPU) running transformers' rope initialisation:
//   inv = 1.0 / (theta ** (torch.arange(0, D, 2, dtype=torch.int64).float() / D))
// and, for "llama3", _compute_llama3_parameters on that inv (factor 8, low 1, high 4,
// original_max_position_embeddings 8192); printed with inv.numpy().view(numpy.uint32).
TEST(Rope, InverseFrequenciesMatchPyTorchBits) {
  const std::vector<uint32_t> default_bits = {0x3f800000, 0x3e5c9d35, 0x3d3e1e95,
                                               0x3c23d70a, 0x3b0d3169, 0x39f35a5c};
  const std::vector<float> got_default = cpu_ref::rope_inv_freq(12, RopeParams{});
  ASSERT_EQ(got_default.size(), default_bits.size());
  for (size_t i = 0; i < default_bits.size(); ++i)
    EXPECT_EQ(got_default[i], from_bits(default_bits[i])) << "default i=" << i;

  RopeParams llama3;
  llama3.theta = 500000.0f;
  llama3.scaling_factor = 8.0f;
  const std::vector<uint32_t> llama3_bits = {0x3f800000, 0x3e4693b0, 0x3d1a08c8, 0x3beef74f,
                                              0x3a0995d2, 0x380fc8f8, 0x36df10c4, 0x35ad07a7};
  const std::vector<float> got_llama3 = cpu_ref::rope_inv_freq(16, llama3);
  ASSERT_EQ(got_llama3.size(), llama3_bits.size());
  for (size_t i = 0; i < llama3_bits.size(); ++i)
    EXPECT_EQ(got_llama3[i], from_bits(llama3_bits[i])) << "llama3 i=" << i;
}

}  // namespace
}  // namespace anvil
