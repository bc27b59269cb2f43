// attention_mask_bench: the optimized CPU attention (forward + backward) under each mask of
// backend/attention_mask.h, against dense causal attention at the same length. For every
// length and mask it prints the time of one forward + backward, tokens/s, the visible pairs
// (counted exactly from the mask rule), the ideal speedup (dense pairs / mask pairs), the
// measured speedup and their ratio: how much of the skipped work the kernels turn into time.
// Usage: attention_mask_bench [--lengths 8192,32768,65536] [--heads 4] [--kv-heads 2]
//                             [--head-dim 64] [--segment 256] [--reps 2] [--dtype f32|bf16]
//                             [--cpu-time]
// --cpu-time times with the process CPU clock: with OMP_NUM_THREADS=1 that is the work's time
// on its core however loaded the shared machine is.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/buffer.h"
#include "core/error.h"

namespace anvil {
namespace {

struct Options {
  std::vector<int64_t> lengths = {8192, 32768, 65536};
  int heads = 4;
  int kv_heads = 2;
  int head_dim = 64;
  int segment = 256;
  int reps = 2;
  DType dtype = DType::f32;
  bool cpu_time = false;
};

struct NamedMask {
  std::string name;
  MaskRule rule;
};

std::vector<NamedMask> masks(int segment) {
  MaskRule dense, window, strided, lines, lines_sinks;
  window.window = 8 * segment;
  strided.pattern = SparsePattern::strided;
  strided.segment = segment;
  strided.stride = 8;
  lines.pattern = SparsePattern::lines;
  lines.segment = segment;
  lines_sinks = lines;
  lines_sinks.sinks = 64;
  return {{"dense causal", dense},
          {"window " + std::to_string(window.window), window},
          {"strided s=8", strided},
          {"lines", lines},
          {"lines + 64 sinks", lines_sinks}};
}

// Returns the causal pairs (t, s <= t) of an n-position sequence the rule leaves visible.
double visible_pairs(const MaskRule& rule, int64_t n) {
  double pairs = 0.0;
#pragma omp parallel for reduction(+ : pairs) schedule(dynamic, 256)
  for (int64_t t = 0; t < n; ++t) {
    int64_t row = 0;
    for (int64_t s = 0; s <= t; ++s) row += position_visible(rule, t, s) ? 1 : 0;
    pairs += static_cast<double>(row);
  }
  return pairs;
}

Tensor random_tensor(Backend& backend, std::vector<std::unique_ptr<Buffer>>& owned, DType dtype,
                     Shape shape) {
  owned.push_back(std::make_unique<Buffer>(
      backend, static_cast<size_t>(shape.numel()) * dtype_size(dtype), MemoryCategory::workspace));
  const Tensor t = owned.back()->as(dtype, shape);
  std::mt19937 rng(static_cast<unsigned>(owned.size()));
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> host(static_cast<size_t>(t.numel()));
  for (float& x : host) x = dist(rng);
  if (dtype == DType::f32) {
    backend.copy_from_host(t, host.data());
  } else {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); ++i) bits[i] = float_to_bf16(host[i]);
    backend.copy_from_host(t, bits.data());
  }
  return t;
}

double seconds_now(bool cpu_time) {
  if (cpu_time) {
    timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::vector<int64_t> parse_lengths(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  for (std::string item; std::getline(in, item, ',');) out.push_back(std::stoll(item));
  return out;
}

void run(const Options& o) {
  auto backend = make_backend("cpu");
  std::printf("== attention forward + backward, B=1 Hq=%d Hkv=%d D=%d %s, %d threads, best of "
              "%d, %s ==\n",
              o.heads, o.kv_heads, o.head_dim, std::string(dtype_name(o.dtype)).c_str(),
              omp_get_max_threads(), o.reps, o.cpu_time ? "CPU time" : "wall clock");
  std::printf("%-8s %-18s %10s %12s %12s %10s %10s %8s\n", "tokens", "mask", "fwd+bwd s",
              "tokens/s", "pairs", "ideal x", "measured x", "of ideal");
  for (const int64_t T : o.lengths) {
    std::vector<std::unique_ptr<Buffer>> owned;
    const Shape q_shape{1, T, o.heads, o.head_dim}, kv_shape{1, T, o.kv_heads, o.head_dim};
    const Tensor q = random_tensor(*backend, owned, o.dtype, q_shape);
    const Tensor k = random_tensor(*backend, owned, o.dtype, kv_shape);
    const Tensor v = random_tensor(*backend, owned, o.dtype, kv_shape);
    const Tensor dout = random_tensor(*backend, owned, o.dtype, q_shape);
    const Tensor out = random_tensor(*backend, owned, o.dtype, q_shape);
    const Tensor dq = random_tensor(*backend, owned, o.dtype, q_shape);
    const Tensor dk = random_tensor(*backend, owned, o.dtype, kv_shape);
    const Tensor dv = random_tensor(*backend, owned, o.dtype, kv_shape);
    const Tensor lse = random_tensor(*backend, owned, DType::f32, Shape{1, o.heads, T});
    double dense_seconds = 0.0, dense_pairs = 0.0;
    for (const NamedMask& mask : masks(o.segment)) {
      AttentionParams params;
      params.causal = mask.rule.causal;
      params.window = mask.rule.window;
      params.pattern = mask.rule.pattern;
      params.segment = mask.rule.segment;
      params.stride = mask.rule.stride;
      params.sinks = mask.rule.sinks;
      double best = 1e30;
      for (int r = 0; r < o.reps; ++r) {
        const double start = seconds_now(o.cpu_time);
        backend->attention_forward(q, k, v, out, lse, params);
        backend->attention_backward(dout, q, k, v, out, lse, dq, dk, dv, params);
        best = std::min(best, seconds_now(o.cpu_time) - start);
      }
      const double pairs = visible_pairs(mask.rule, T);
      if (mask.rule.pattern == SparsePattern::dense && mask.rule.window == 0) {
        dense_seconds = best;
        dense_pairs = pairs;
      }
      const double ideal = dense_pairs / pairs, measured = dense_seconds / best;
      std::printf("%-8lld %-18s %10.3f %12.0f %12.4g %10.2f %10.2f %8.2f\n",
                  static_cast<long long>(T), mask.name.c_str(), best, T / best, pairs, ideal,
                  measured, measured / ideal);
      std::fflush(stdout);
    }
  }
}

}  // namespace
}  // namespace anvil

int main(int argc, char** argv) {
  anvil::Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    const bool has_value = i + 1 < argc;
    if (arg == "--lengths" && has_value) {
      o.lengths = anvil::parse_lengths(argv[++i]);
    } else if (arg == "--heads" && has_value) {
      o.heads = std::stoi(argv[++i]);
    } else if (arg == "--kv-heads" && has_value) {
      o.kv_heads = std::stoi(argv[++i]);
    } else if (arg == "--head-dim" && has_value) {
      o.head_dim = std::stoi(argv[++i]);
    } else if (arg == "--segment" && has_value) {
      o.segment = std::stoi(argv[++i]);
    } else if (arg == "--reps" && has_value) {
      o.reps = std::stoi(argv[++i]);
    } else if (arg == "--cpu-time") {
      o.cpu_time = true;
    } else if (arg == "--dtype" && has_value) {
      const std::string name = argv[++i];
      o.dtype = name == "bf16" ? anvil::DType::bf16 : anvil::DType::f32;
    } else {
      std::fprintf(stderr,
                   "usage: attention_mask_bench [--lengths 8192,32768,65536] [--heads 4] "
                   "[--kv-heads 2] [--head-dim 64] [--segment 256] [--reps 2] "
                   "[--dtype f32|bf16] [--cpu-time]\n");
      return 2;
    }
  }
  try {
    anvil::run(o);
  } catch (const anvil::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
