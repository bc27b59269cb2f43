// kernel_bench: micro-benchmarks of the CPU backend on the shapes of a training step.
//   gemm  the measured GEMM ceilings (f32 and bf16 at a large square size) and the model's
//         GEMM shapes (M = B*T rows) in GFLOP/s;
//   ops   every op group on the model's shapes, optimized ("cpu") against reference
//         ("cpu-ref"), with the speedup and GFLOP/s or GB/s;
//   step  forward + backward of the model (f32 and bf16) and one AdamW pass over all
//         parameters: time, tokens/s and MFU against the measured ceiling of the dtype; and
//         the reference backend's step on a smaller batch (tokens/s compared per token).
// Times are the minimum over repetitions (wall clock) because the machines this runs on are
// shared; the first call of each op is a warm-up (primitive creation, tables, threads).
// Usage: kernel_bench [--sections gemm,ops,step] [--batch 8] [--seq 256] [--reps 5]
//                     [--gemm-size 2048] [--reference-batch 1] [--no-reference] [--cpu-time]
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/cpu_info.h"
#include "core/error.h"
#include "model/llama.h"

namespace anvil {
namespace {

struct Options {
  std::string sections = "gemm,ops,step";
  int batch = 8;
  int seq = 256;
  int reps = 5;
  int gemm_size = 2048;
  int reference_batch = 1;
  bool reference = true;
  bool cpu_time = false;
};

// Set by --cpu-time: time with the process CPU clock instead of the wall clock.
bool g_cpu_time = false;

// The 32M-parameter config of the performance issue.
LlamaConfig bench_config(int seq) {
  LlamaConfig c;
  c.dim = 512;
  c.n_layers = 8;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.ffn_dim = 1408;
  c.vocab_size = 8192;
  c.max_seq_len = seq;
  return c;
}

// Returns the wall clock, or with --cpu-time the CPU time of all threads (with one thread,
// OMP_NUM_THREADS=1, this is the time the work took on its core however loaded the machine).
double now_seconds() {
  if (g_cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Returns the fastest of `reps` timed calls, after one untimed warm-up call when asked.
double min_seconds(Backend& backend, int reps, const std::function<void()>& fn,
                   bool warm_up = true) {
  if (warm_up) {
    fn();
    backend.synchronize();
  }
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const double start = now_seconds();
    fn();
    backend.synchronize();
    best = std::min(best, now_seconds() - start);
  }
  return best;
}

// Device tensors with random contents, owned for the lifetime of the pool.
class TensorPool {
 public:
  explicit TensorPool(Backend& backend) : backend_(backend) {}
  Tensor random(DType dtype, Shape shape, float lo = -1.0f, float hi = 1.0f) {
    buffers_.push_back(std::make_unique<Buffer>(
        backend_, std::max<size_t>(1, static_cast<size_t>(shape.numel()) * dtype_size(dtype)),
        MemoryCategory::workspace));
    const Tensor t = buffers_.back()->as(dtype, shape);
    std::uniform_real_distribution<float> dist(lo, hi);
    if (dtype == DType::f32) {
      std::vector<float> host(static_cast<size_t>(t.numel()));
      for (float& x : host) x = dist(rng_);
      backend_.copy_from_host(t, host.data());
    } else if (dtype == DType::bf16) {
      std::vector<uint16_t> host(static_cast<size_t>(t.numel()));
      for (uint16_t& x : host) x = float_to_bf16(dist(rng_));
      backend_.copy_from_host(t, host.data());
    } else {
      std::vector<int32_t> host(static_cast<size_t>(t.numel()));
      for (int32_t& x : host) x = static_cast<int32_t>(rng_() % static_cast<uint32_t>(hi));
      backend_.copy_from_host(t, host.data());
    }
    return t;
  }

 private:
  Backend& backend_;
  std::mt19937 rng_{1234};
  std::vector<std::unique_ptr<Buffer>> buffers_;
};

double matmul_gflops(Backend& backend, int reps, DType dtype, int64_t M, int64_t K, int64_t N,
                     bool ta, bool tb) {
  TensorPool pool(backend);
  const Tensor a = pool.random(dtype, ta ? Shape{K, M} : Shape{M, K});
  const Tensor b = pool.random(dtype, tb ? Shape{N, K} : Shape{K, N});
  const Tensor c = pool.random(DType::f32, Shape{M, N});
  const double t = min_seconds(backend, reps, [&] { backend.matmul(a, b, c, ta, tb, 1.0f, 0.0f); });
  return 2.0 * static_cast<double>(M) * K * N / t / 1e9;
}

// Returns the measured GEMM ceiling of `dtype` (GFLOP/s) at a square size.
double gemm_ceiling(Backend& backend, const Options& o, DType dtype) {
  return matmul_gflops(backend, o.reps, dtype, o.gemm_size, o.gemm_size, o.gemm_size, false,
                       false);
}

void run_gemm_section(const Options& o, double ceilings[2]) {
  auto backend = make_backend("cpu");
  std::printf("\n== GEMM (oneDNN through the cpu backend, %d threads) ==\n", omp_get_max_threads());
  ceilings[0] = gemm_ceiling(*backend, o, DType::f32);
  ceilings[1] = gemm_ceiling(*backend, o, DType::bf16);
  std::printf("ceiling %dx%dx%d: f32 %.1f GFLOP/s, bf16 (f32 accumulate) %.1f GFLOP/s\n",
              o.gemm_size, o.gemm_size, o.gemm_size, ceilings[0], ceilings[1]);
  const LlamaConfig c = bench_config(o.seq);
  const int64_t rows = int64_t{o.batch} * o.seq;
  struct Shape3 {
    const char* what;
    int64_t M, K, N;
    bool ta, tb;
  };
  const Shape3 shapes[] = {
      {"q/o proj fwd", rows, c.dim, c.q_dim(), false, true},
      {"k/v proj fwd", rows, c.dim, c.kv_dim(), false, true},
      {"gate/up fwd", rows, c.dim, c.ffn_dim, false, true},
      {"down fwd", rows, c.ffn_dim, c.dim, false, true},
      {"lm head fwd", rows, c.dim, c.vocab_size, false, true},
      {"down dx", rows, c.dim, c.ffn_dim, false, false},
      {"lm head dx", rows, c.vocab_size, c.dim, false, false},
      {"gate/up dW", c.ffn_dim, rows, c.dim, true, false},
      {"lm head dW", c.vocab_size, rows, c.dim, true, false},
  };
  std::printf("%-14s %6s %6s %6s %5s %10s %10s\n", "shape", "M", "K", "N", "op", "f32", "bf16");
  for (const Shape3& s : shapes) {
    const double f32 = matmul_gflops(*backend, o.reps, DType::f32, s.M, s.K, s.N, s.ta, s.tb);
    const double bf16 = matmul_gflops(*backend, o.reps, DType::bf16, s.M, s.K, s.N, s.ta, s.tb);
    std::printf("%-14s %6lld %6lld %6lld %c%c    %10.1f %10.1f\n", s.what,
                static_cast<long long>(s.M), static_cast<long long>(s.K),
                static_cast<long long>(s.N), s.ta ? 'T' : 'N', s.tb ? 'T' : 'N', f32, bf16);
  }
}

// Makes an op's tensors on a backend (from its pool) and returns the call to time.
using OpSetup = std::function<std::function<void()>(Backend&, TensorPool&)>;

void run_ops_section(const Options& o) {
  auto optimized = make_backend("cpu");
  auto reference = make_backend("cpu-ref");
  const LlamaConfig c = bench_config(o.seq);
  const int64_t N = int64_t{o.batch} * o.seq, C = c.dim, F = c.ffn_dim, V = c.vocab_size;
  const int64_t B = o.batch, T = o.seq, Hq = c.n_heads, Hkv = c.n_kv_heads;
  const int64_t D = c.resolved_head_dim();
  const int64_t P = c.param_count();
  std::printf("\n== ops: optimized vs reference (B=%lld T=%lld; optimized min of %d, reference "
              "1 run) ==\n",
              static_cast<long long>(B), static_cast<long long>(T), o.reps);
  std::printf("%-36s %12s %12s %9s %16s\n", "op", "reference ms", "optimized ms", "speedup",
              "optimized rate");
  auto report = [&](const std::string& name, double work, bool flops, const OpSetup& setup) {
    double seconds[2] = {0.0, 0.0};
    for (int which = 0; which < (o.reference ? 2 : 1); ++which) {
      Backend& backend = which == 0 ? *optimized : *reference;
      TensorPool pool(backend);
      const std::function<void()> call = setup(backend, pool);
      seconds[which] = which == 0 ? min_seconds(backend, o.reps, call)
                                  : min_seconds(backend, 1, call, false);
    }
    std::printf("%-36s %12.2f %12.3f %8.1fx %9.1f %s\n", name.c_str(), seconds[1] * 1e3,
                seconds[0] * 1e3, o.reference ? seconds[1] / seconds[0] : 0.0,
                work / seconds[0] / 1e9, flops ? "GFLOP/s" : "GB/s");
  };
  const double causal_pairs = static_cast<double>(B) * Hq * T * (T + 1) / 2.0;
  for (DType dt : {DType::f32, DType::bf16}) {
    const std::string tag = fmt::format(" {}", dtype_name(dt));
    const double es = static_cast<double>(dtype_size(dt));
    report("matmul (N,C)x(C,C)^T" + tag, 2.0 * N * C * C, true, [&](Backend& be, TensorPool& p) {
      const Tensor a = p.random(dt, Shape{N, C}), w = p.random(dt, Shape{C, C});
      const Tensor y = p.random(dt, Shape{N, C});
      return [&be, a, w, y] { be.matmul(a, w, y, false, true, 1.0f, 0.0f); };
    });
    report("rmsnorm fwd (N,C)" + tag, N * C * (4.0 + es), false, [&](Backend& be, TensorPool& p) {
      const Tensor x = p.random(DType::f32, Shape{N, C}), w = p.random(DType::f32, Shape{C});
      const Tensor out = p.random(dt, Shape{N, C}), rstd = p.random(DType::f32, Shape{N});
      return [&be, x, w, out, rstd] { be.rmsnorm_forward(x, w, out, rstd, 1e-5f); };
    });
    report("rmsnorm bwd (N,C)" + tag, N * C * 16.0, false, [&](Backend& be, TensorPool& p) {
      const Tensor x = p.random(DType::f32, Shape{N, C}), w = p.random(DType::f32, Shape{C});
      const Tensor g = p.random(DType::f32, Shape{N, C}), dx = p.random(DType::f32, Shape{N, C});
      const Tensor rstd = p.random(DType::f32, Shape{N}, 0.5f, 1.5f);
      const Tensor dw = p.random(DType::f32, Shape{C});
      return [&be, x, w, g, dx, rstd, dw] { be.rmsnorm_backward(g, x, w, rstd, dx, dw); };
    });
    report("rope fwd q (B,T,Hq,D)" + tag, 2.0 * N * Hq * D * es, false,
           [&](Backend& be, TensorPool& p) {
             const Tensor x = p.random(dt, Shape{B, T, Hq, D});
             const Tensor pos = p.random(DType::i32, Shape{B, T}, 0.0f, static_cast<float>(T));
             const RopeParams params = c.rope_params();
             return [&be, x, pos, params] { be.rope_forward(x, x, pos, params); };
           });
    report("swiglu fwd (N,F)" + tag, 3.0 * N * F * es, false, [&](Backend& be, TensorPool& p) {
      const Tensor g = p.random(dt, Shape{N, F}), u = p.random(dt, Shape{N, F});
      const Tensor out = p.random(dt, Shape{N, F});
      return [&be, g, u, out] { be.swiglu_forward(g, u, out); };
    });
    report("swiglu bwd (N,F)" + tag, 5.0 * N * F * es, false, [&](Backend& be, TensorPool& p) {
      const Tensor g = p.random(dt, Shape{N, F}), u = p.random(dt, Shape{N, F});
      const Tensor d = p.random(dt, Shape{N, F}), dg = p.random(dt, Shape{N, F});
      const Tensor du = p.random(dt, Shape{N, F});
      return [&be, g, u, d, dg, du] { be.swiglu_backward(d, g, u, dg, du); };
    });
    // Causal attention: forward q k^T and p v over the visible half; backward five products.
    auto attention_tensors = [&](TensorPool& p, std::vector<Tensor>& t) {
      t = {p.random(dt, Shape{B, T, Hq, D}), p.random(dt, Shape{B, T, Hkv, D}),
           p.random(dt, Shape{B, T, Hkv, D}), p.random(dt, Shape{B, T, Hq, D}),
           p.random(DType::f32, Shape{B, Hq, T}), p.random(dt, Shape{B, T, Hq, D}),
           p.random(dt, Shape{B, T, Hq, D}), p.random(dt, Shape{B, T, Hkv, D}),
           p.random(dt, Shape{B, T, Hkv, D})};
    };
    report("attention fwd causal" + tag, 4.0 * causal_pairs * D, true,
           [&](Backend& be, TensorPool& p) {
             std::vector<Tensor> t;
             attention_tensors(p, t);
             return [&be, t] { be.attention_forward(t[0], t[1], t[2], t[3], t[4], {}); };
           });
    report("attention bwd causal" + tag, 10.0 * causal_pairs * D, true,
           [&](Backend& be, TensorPool& p) {
             std::vector<Tensor> t;
             attention_tensors(p, t);
             be.attention_forward(t[0], t[1], t[2], t[3], t[4], {});
             return [&be, t] {
               be.attention_backward(t[5], t[0], t[1], t[2], t[3], t[4], t[6], t[7], t[8], {});
             };
           });
    report("cross_entropy+dlogits (N,V)" + tag, N * V * (4.0 + es), false,
           [&](Backend& be, TensorPool& p) {
             const Tensor logits = p.random(DType::f32, Shape{N, V}, -4.0f, 4.0f);
             const Tensor targets = p.random(DType::i32, Shape{N}, 0.0f, static_cast<float>(V));
             const Tensor losses = p.random(DType::f32, Shape{N});
             const Tensor dlogits = p.random(dt, Shape{N, V});
             return [&be, logits, targets, losses, dlogits] {
               be.cross_entropy(logits, targets, nullptr, -100, losses, &dlogits, 1.0f);
             };
           });
    // The second of two vocabulary shards: stats, then dlogits from a given lse (the two
    // halves of the vocabulary-parallel cross-entropy).
    report("cross_entropy_shard (N,V/2)" + tag, N * (V / 2) * (8.0 + es), false,
           [&](Backend& be, TensorPool& p) {
             const int64_t Vs = V / 2;
             const Tensor logits = p.random(DType::f32, Shape{N, Vs}, -4.0f, 4.0f);
             const Tensor targets = p.random(DType::i32, Shape{N}, 0.0f, static_cast<float>(V));
             const Tensor stats = p.random(DType::f32, Shape{N, 3});
             const Tensor lse = p.random(DType::f32, Shape{N}, 10.0f, 11.0f);
             const Tensor dlogits = p.random(dt, Shape{N, Vs});
             return [&be, logits, targets, stats, lse, dlogits, Vs] {
               be.cross_entropy_shard_stats(logits, targets, -100, Vs, stats);
               be.cross_entropy_shard_backward(logits, targets, nullptr, -100, Vs, lse, dlogits,
                                               1.0f);
             };
           });
  }
  report("embedding fwd (N,C) f32", N * C * 8.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor ids = p.random(DType::i32, Shape{N}, 0.0f, static_cast<float>(V));
    const Tensor table = p.random(DType::f32, Shape{V, C}), out = p.random(DType::f32, Shape{N, C});
    return [&be, ids, table, out] { be.embedding_forward(ids, table, out); };
  });
  report("embedding bwd (N,C) f32", N * C * 12.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor ids = p.random(DType::i32, Shape{N}, 0.0f, static_cast<float>(V));
    const Tensor dtable = p.random(DType::f32, Shape{V, C}), d = p.random(DType::f32, Shape{N, C});
    return [&be, ids, dtable, d] { be.embedding_backward(ids, d, dtable); };
  });
  report("add (N,C) f32", N * C * 12.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor a = p.random(DType::f32, Shape{N, C}), b = p.random(DType::f32, Shape{N, C});
    return [&be, a, b] { be.add(a, b, a); };
  });
  report("adamw all params + bf16 copy", P * 30.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor param = p.random(DType::f32, Shape{P}), grad = p.random(DType::f32, Shape{P});
    const Tensor m = p.random(DType::f32, Shape{P}, 0.0f, 0.0f);
    const Tensor v = p.random(DType::f32, Shape{P}, 0.0f, 0.0f);
    const Tensor copy = p.random(DType::bf16, Shape{P});
    return [&be, param, grad, m, v, copy] { be.adamw_step(param, grad, m, v, {}, &copy); };
  });
  report("cast all params f32->bf16", P * 6.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor src = p.random(DType::f32, Shape{P}), dst = p.random(DType::bf16, Shape{P});
    return [&be, src, dst] { be.cast(src, dst); };
  });
  report("sum_squares all params", P * 4.0, false, [&](Backend& be, TensorPool& p) {
    const Tensor x = p.random(DType::f32, Shape{P});
    return [&be, x] { (void)be.sum_squares(x); };
  });
}

// Times forward_backward of the model on `backend` and returns the seconds per step.
double step_seconds(Backend& backend, const LlamaConfig& config, int batch, int seq,
                    DType compute, int reps, bool warm_up = true) {
  ModelOptions options;
  options.max_batch = batch;
  options.max_seq = seq;
  options.compute_dtype = compute;
  LlamaModel model(config, backend, options);
  model.init_weights(1);
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * seq), targets(tokens.size());
  std::mt19937 rng(7);
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size));
    targets[i] = static_cast<int32_t>(rng() % static_cast<uint32_t>(config.vocab_size));
  }
  Batch b;
  b.tokens = Tensor(tokens.data(), DType::i32, Shape{batch, seq});
  b.targets = Tensor(targets.data(), DType::i32, Shape{batch, seq});
  const float scale = 1.0f / static_cast<float>(tokens.size());
  return min_seconds(
      backend, reps,
      [&] {
        model.gradients().zero();
        model.forward_backward(b, scale);
      },
      warm_up);
}

void run_step_section(const Options& o, const double ceilings[2]) {
  auto backend = make_backend("cpu");
  const LlamaConfig c = bench_config(o.seq);
  const double tokens = static_cast<double>(o.batch) * o.seq;
  // FLOPs per step: the PaLM convention (6 x matmul params + 12 L T d per token), and the
  // causal count that halves the attention term (the work a causal model needs); MFU below
  // uses the causal count.
  const double flops = c.flops_per_token(o.seq) * tokens;
  const double causal_flops = flops - 6.0 * c.n_layers * o.seq * c.q_dim() * tokens;
  std::printf("\n== training step: %s, B=%d T=%d (%.0f tokens), %.1f GFLOP per step (%.1f "
              "with the PaLM convention's non-causal attention term) ==\n",
              c.summary().c_str(), o.batch, o.seq, tokens, causal_flops / 1e9, flops / 1e9);
  for (int i = 0; i < 2; ++i) {
    const DType dt = i == 0 ? DType::f32 : DType::bf16;
    const double t = step_seconds(*backend, c, o.batch, o.seq, dt, o.reps);
    std::printf("cpu %-4s forward+backward: %8.3f s  %9.0f tokens/s  %6.1f GFLOP/s  MFU %.0f%% of "
                "the measured %s GEMM ceiling (%.1f GFLOP/s)\n",
                std::string(dtype_name(dt)).c_str(), t, tokens / t, causal_flops / t / 1e9,
                100.0 * causal_flops / t / 1e9 / ceilings[i], std::string(dtype_name(dt)).c_str(),
                ceilings[i]);
  }
  {
    TensorPool pool(*backend);
    const int64_t P = c.param_count();
    const Tensor param = pool.random(DType::f32, Shape{P});
    const Tensor grad = pool.random(DType::f32, Shape{P});
    const Tensor m = pool.random(DType::f32, Shape{P}, 0.0f, 0.0f);
    const Tensor v = pool.random(DType::f32, Shape{P}, 0.0f, 0.0f);
    const double t = min_seconds(*backend, o.reps, [&] {
      backend->adamw_step(param, grad, m, v, {}, nullptr);
    });
    std::printf("cpu AdamW over all %lld parameters: %.1f ms\n", static_cast<long long>(P),
                t * 1e3);
  }
  if (!o.reference) return;
  auto reference = make_backend("cpu-ref");
  const int rb = o.reference_batch;
  const double t_opt = step_seconds(*backend, c, rb, o.seq, DType::f32, o.reps);
  const double t_ref = step_seconds(*reference, c, rb, o.seq, DType::f32, 1, false);
  std::printf("B=%d T=%d f32 forward+backward: cpu-ref %.2f s, cpu %.3f s: %.1fx faster\n", rb,
              o.seq, t_ref, t_opt, t_ref / t_opt);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      ANVIL_CHECK(i + 1 < argc, "[kernel_bench] {} needs a value", arg);
      return argv[++i];
    };
    if (arg == "--sections") o.sections = value();
    else if (arg == "--batch") o.batch = std::stoi(value());
    else if (arg == "--seq") o.seq = std::stoi(value());
    else if (arg == "--reps") o.reps = std::stoi(value());
    else if (arg == "--gemm-size") o.gemm_size = std::stoi(value());
    else if (arg == "--reference-batch") o.reference_batch = std::stoi(value());
    else if (arg == "--no-reference") o.reference = false;
    else if (arg == "--cpu-time") o.cpu_time = true;
    else ANVIL_FAIL("[kernel_bench] unknown argument '{}' (see the comment at the top of "
                    "bench/kernels/kernel_bench.cpp)", arg);
  }
  return o;
}

int run(int argc, char** argv) {
  const Options o = parse(argc, argv);
  g_cpu_time = o.cpu_time;
  const CpuInfo& cpu = cpu_info();
  std::printf("%s\n", describe_backends().at(0).c_str());
  std::printf("threads %d; %s; load average at start: ", omp_get_max_threads(),
              cpu.model_name.c_str());
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    char line[128] = {};
    if (std::fgets(line, sizeof line, f)) std::printf("%s", line);
    std::fclose(f);
  }
  double ceilings[2] = {0.0, 0.0};
  auto wants = [&](const char* section) { return o.sections.find(section) != std::string::npos; };
  if (wants("gemm")) run_gemm_section(o, ceilings);
  if (wants("ops")) run_ops_section(o);
  if (wants("step")) {
    if (ceilings[0] == 0.0) {
      auto backend = make_backend("cpu");
      ceilings[0] = gemm_ceiling(*backend, o, DType::f32);
      ceilings[1] = gemm_ceiling(*backend, o, DType::bf16);
    }
    run_step_section(o, ceilings);
  }
  return 0;
}

}  // namespace
}  // namespace anvil

int main(int argc, char** argv) {
  try {
    return anvil::run(argc, argv);
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "kernel_bench: error: %s\n", e.what());
    return 1;
  }
}
