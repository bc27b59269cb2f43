// Heap use of a training step on the optimized CPU backend, measured by replacing malloc and
// its relatives process-wide (this binary only, and never in sanitizer builds, which replace
// them too). Checks: after warm-up, a step (forward, backward, AdamW over every group, the
// gradient norm and the finite check) makes no heap allocation of 1 KiB or more and leaves
// live heap bytes unchanged, in f32 and bf16, with and without activation checkpointing, on
// the process's OpenMP thread count and on one thread (libgomp allocates a team for every
// parallel region that runs on one thread, so the ops must not enter one then); and
// checkpointing lowers the peak heap of building the model and running a step. With the
// OpenBLAS GEMM (AVX2 and generic tables) a step makes no allocation at all; with oneDNN's
// (AVX-512) the only small ones left are its per-execution bookkeeping (a few tens of bytes
// each, freed before the call returns), which its API offers no way to avoid. CTest runs this
// binary under every kernel table the CPU supports and again with OMP_NUM_THREADS=1.
#include <gtest/gtest.h>
#include <malloc.h>
#include <omp.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "model/llama.h"

extern "C" {
void* __libc_malloc(size_t size);
void* __libc_calloc(size_t count, size_t size);
void* __libc_realloc(void* ptr, size_t size);
void* __libc_memalign(size_t alignment, size_t size);
void __libc_free(void* ptr);
}

namespace {

constexpr size_t kLargeAllocation = 1024;

std::atomic<int64_t> g_live_bytes{0};
std::atomic<int64_t> g_peak_bytes{0};
std::atomic<int64_t> g_small_allocations{0};
std::atomic<int64_t> g_large_allocations{0};

void* track(void* p) {
  if (p == nullptr) return p;
  const size_t size = malloc_usable_size(p);
  (size >= kLargeAllocation ? g_large_allocations : g_small_allocations)
      .fetch_add(1, std::memory_order_relaxed);
  const int64_t live = g_live_bytes.fetch_add(static_cast<int64_t>(size)) + size;
  int64_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (live > peak && !g_peak_bytes.compare_exchange_weak(peak, live)) {
  }
  return p;
}

void untrack(void* p) {
  if (p != nullptr) g_live_bytes.fetch_sub(static_cast<int64_t>(malloc_usable_size(p)));
}

}  // namespace

extern "C" {
void* malloc(size_t size) { return track(__libc_malloc(size)); }
void* calloc(size_t count, size_t size) { return track(__libc_calloc(count, size)); }
void* realloc(void* ptr, size_t size) {
  untrack(ptr);
  return track(__libc_realloc(ptr, size));
}
void free(void* ptr) {
  untrack(ptr);
  __libc_free(ptr);
}
void* memalign(size_t alignment, size_t size) { return track(__libc_memalign(alignment, size)); }
void* aligned_alloc(size_t alignment, size_t size) {
  return track(__libc_memalign(alignment, size));
}
int posix_memalign(void** out, size_t alignment, size_t size) {
  void* p = track(__libc_memalign(alignment, size));
  if (p == nullptr) return ENOMEM;
  *out = p;
  return 0;
}
}

namespace anvil {
namespace {

constexpr int kBatch = 2;
constexpr int kSeq = 96;

LlamaConfig step_config() {
  LlamaConfig c;
  c.dim = 128;
  c.n_layers = 4;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.ffn_dim = 352;
  c.vocab_size = 512;
  c.max_seq_len = kSeq;
  return c;
}

ModelOptions step_options(DType compute, bool checkpointing) {
  ModelOptions o;
  o.max_batch = kBatch;
  o.max_seq = kSeq;
  o.compute_dtype = compute;
  o.activation_checkpointing = checkpointing;
  return o;
}

// A model, its AdamW state and one batch: everything a training step touches.
struct Trainer {
  LlamaModel model;
  std::vector<Buffer> m, v;
  std::vector<int32_t> tokens, targets;
  int64_t step = 0;

  Trainer(Backend& backend, DType compute, bool checkpointing)
      : model(step_config(), backend, step_options(compute, checkpointing)),
        tokens(kBatch * kSeq),
        targets(kBatch * kSeq) {
    model.init_weights(1);
    for (int g = 0; g < model.parameters().group_count(); ++g) {
      const Tensor p = model.parameters().group(g);
      m.emplace_back(backend, p.nbytes(), MemoryCategory::optimizer_state);
      v.emplace_back(backend, p.nbytes(), MemoryCategory::optimizer_state);
      backend.fill_zero(m.back().as(DType::f32, p.shape));
      backend.fill_zero(v.back().as(DType::f32, p.shape));
    }
    for (size_t i = 0; i < tokens.size(); ++i) {
      tokens[i] = static_cast<int32_t>((i * 37) % 512);
      targets[i] = static_cast<int32_t>((i * 101 + 7) % 512);
    }
  }

  void train_step() {
    Backend& backend = model.backend();
    Batch batch;
    batch.tokens = Tensor(tokens.data(), DType::i32, Shape{kBatch, kSeq});
    batch.targets = Tensor(targets.data(), DType::i32, Shape{kBatch, kSeq});
    model.gradients().zero();
    model.forward_backward(batch, 1.0f / (kBatch * kSeq));
    double norm_sq = 0.0;
    bool finite = true;
    for (int g = 0; g < model.gradients().group_count(); ++g) {
      norm_sq += backend.sum_squares(model.gradients().group(g));
      finite = finite && backend.all_finite(model.gradients().group(g));
    }
    ASSERT_TRUE(finite && norm_sq > 0.0);
    AdamWParams params;
    params.step = ++step;
    params.weight_decay = 0.1f;
    for (int g = 0; g < model.parameters().group_count(); ++g) {
      const Tensor p = model.parameters().group(g);
      backend.adamw_step(p, model.gradients().group(g), m[g].as(DType::f32, p.shape),
                         v[g].as(DType::f32, p.shape), params, nullptr);
    }
  }
};

TEST(StepAllocations, SteadyStateStepsAllocateNothingLarge) {
  const int process_threads = omp_get_max_threads();
  std::vector<int> thread_counts = {process_threads};
  if (process_threads > 1) thread_counts.push_back(1);
  for (const int threads : thread_counts) {
    omp_set_num_threads(threads);
    auto backend = make_backend("cpu");
    for (DType compute : {DType::f32, DType::bf16}) {
      for (bool checkpointing : {false, true}) {
        Trainer trainer(*backend, compute, checkpointing);
        trainer.train_step();  // first use: primitive cache, rope table, scratch buffers, threads
        trainer.train_step();
        const int64_t live = g_live_bytes.load(), small = g_small_allocations.load();
        const int64_t large = g_large_allocations.load();
        trainer.train_step();
        const int64_t new_large = g_large_allocations.load() - large;
        const int64_t new_small = g_small_allocations.load() - small;
        const int64_t live_change = g_live_bytes.load() - live;
        std::printf("[alloc] %s%s step on %d thread%s: %lld allocations >= 1 KiB, %lld smaller, "
                    "live heap change %lld bytes\n",
                    std::string(dtype_name(compute)).c_str(),
                    checkpointing ? " checkpointed" : "", threads, threads == 1 ? "" : "s",
                    static_cast<long long>(new_large), static_cast<long long>(new_small),
                    static_cast<long long>(live_change));
        EXPECT_EQ(new_large, 0) << dtype_name(compute) << " checkpointing " << checkpointing
                                << " threads " << threads;
        EXPECT_EQ(live_change, 0) << dtype_name(compute) << " checkpointing " << checkpointing
                                  << " threads " << threads;
      }
    }
  }
  omp_set_num_threads(process_threads);
}

TEST(StepAllocations, CheckpointingLowersPeakMemory) {
  auto backend = make_backend("cpu");
  int64_t peak[2] = {0, 0};
  size_t arena[2] = {0, 0};
  for (int checkpointing = 0; checkpointing < 2; ++checkpointing) {
    const int64_t base = g_live_bytes.load();
    g_peak_bytes.store(base);
    {
      Trainer trainer(*backend, DType::f32, checkpointing == 1);
      trainer.train_step();
      arena[checkpointing] = trainer.model.activation_bytes();
    }
    peak[checkpointing] = g_peak_bytes.load() - base;
  }
  std::printf("[alloc] peak heap of build + step: %lld bytes plain (arena %zu), %lld bytes "
              "checkpointed (arena %zu)\n",
              static_cast<long long>(peak[0]), arena[0], static_cast<long long>(peak[1]),
              arena[1]);
  EXPECT_LT(arena[1], arena[0]);
  // The arena shrinks by the activations of all but one layer; the peak must drop by most of it.
  EXPECT_LT(peak[1], peak[0] - static_cast<int64_t>(arena[0] - arena[1]) * 3 / 4);
}

}  // namespace
}  // namespace anvil
