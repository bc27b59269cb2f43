// Op conformance, vocabulary-parallel ops: the shard ops of tensor parallelism checked against
// the whole-vocabulary ops on the same backend (every backend the driver finds: cpu-ref, cpu,
// and cuda when a device is present), and each shard's outputs against cpu-ref's.
//   - embedding_shard: the full table split into T row shards. The sum over shards of the
//     forward outputs must equal embedding_forward exactly (each id hits one shard, the others
//     write 0), and the concatenated shard gradients must equal embedding_backward exactly
//     (same rows added in the same order from the same random base).
//   - cross_entropy_shard: the full logits split into T column shards. The stats are combined
//     in double as a tensor-parallel caller would (M = max m_t, S = sum s_t exp(m_t - M),
//     lse = M + log S, loss = (lse - sum of target logits) * mask) and must give
//     cross_entropy's losses to 1e-6 relative (of max(|loss|, 1): the full op's f32 loss is
//     only that close to the exact one when the loss is near 0); the concatenated shard
//     dlogits, from lse rounded to f32, must equal cross_entropy's dlogits to 1e-6
//     peak-relative in f32 (4e-6 for logits in [-30, 30]), 8e-3 (two bf16 ulps) in bf16 and
//     1e-3 (two f16 ulps, 2 * 2^-11) in f16.
// Every bf16 row has an f16 twin; a backend without f16 kernels skips those with a line.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "op_driver.h"

namespace anvil::test {
namespace {

constexpr int kIgnoreIndex = -100;
constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

HostTensor filled(DType dtype, Shape shape, double value) {
  return HostTensor{dtype, shape, std::vector<double>(static_cast<size_t>(shape.numel()), value)};
}

// Returns columns [begin, begin + width) of a row-major (rows, cols) host tensor.
HostTensor columns(const HostTensor& full, int64_t begin, int64_t width) {
  const int64_t rows = full.shape[0], cols = full.shape[1];
  HostTensor part{full.dtype, Shape{rows, width}, {}};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < width; ++c) part.values.push_back(full.values[r * cols + begin + c]);
  return part;
}

// Returns rows [begin, begin + count) of a row-major (rows, cols) host tensor.
HostTensor rows(const HostTensor& full, int64_t begin, int64_t count) {
  const int64_t cols = full.shape[1];
  HostTensor part{full.dtype, Shape{count, cols}, {}};
  part.values.assign(full.values.begin() + begin * cols,
                     full.values.begin() + (begin + count) * cols);
  return part;
}

// Returns the number of elements where got and want differ (NaN never matches).
int64_t mismatches(const std::vector<double>& got, const std::vector<double>& want) {
  EXPECT_EQ(got.size(), want.size());
  int64_t count = 0;
  for (size_t i = 0; i < std::min(got.size(), want.size()); ++i) count += !(got[i] == want[i]);
  return count;
}

// ---- embedding_shard -------------------------------------------------------------------

struct EmbeddingShardRow {
  int64_t V, C;
  std::vector<int32_t> ids;
  DType table, out;
};

// Returns n ids spread over [0, vocab) with repeats.
std::vector<int32_t> spread_ids(int n, int vocab) {
  std::vector<int32_t> ids(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) ids[i] = (i * i * 7 + 5 * i + 1) % vocab;
  return ids;
}

void check_embedding_shards(Backend& backend, const EmbeddingShardRow& r, int shards) {
  if (!backend.supports_compute_dtype(r.out)) {
    std::printf("[ops] embedding_shard out=%s on %s skipped: the backend has no %s kernels\n",
                std::string(dtype_name(r.out)).c_str(), backend.name().c_str(),
                std::string(dtype_name(r.out)).c_str());
    return;
  }
  Rng rng(r.V * 7919 + r.C * 31 + shards);
  const int64_t N = static_cast<int64_t>(r.ids.size()), Vs = r.V / shards;
  const HostTensor table = random_tensor(rng, r.table, Shape{r.V, r.C});
  const HostTensor dout = random_tensor(rng, r.out, Shape{N, r.C});
  const HostTensor base = random_tensor(rng, DType::f32, Shape{r.V, r.C});
  Workspace ws(backend);
  const Tensor ids = ws.upload("ids", int_tensor(Shape{N}, r.ids));
  backend.embedding_forward(ids, ws.upload("table", table),
                            ws.upload("out", filled(r.out, Shape{N, r.C}, kNan)));
  backend.embedding_backward(ids, ws.upload("dout", dout), ws.upload("dtable", base));
  backend.synchronize();

  std::vector<double> out_sum(static_cast<size_t>(N * r.C), 0.0), dtable_concat;
  for (int t = 0; t < shards; ++t) {
    const std::string s = std::to_string(t);
    const Tensor out_t = ws.upload("out" + s, filled(r.out, Shape{N, r.C}, kNan));
    backend.embedding_shard_forward(ids, ws.upload("table" + s, rows(table, t * Vs, Vs)), out_t,
                                    t * Vs);
    backend.embedding_shard_backward(ids, ws["dout"],
                                     ws.upload("dtable" + s, rows(base, t * Vs, Vs)), t * Vs);
    backend.synchronize();
    const std::vector<double> part = ws.download("out" + s);
    for (size_t i = 0; i < part.size(); ++i) out_sum[i] += part[i];
    const std::vector<double> grad = ws.download("dtable" + s);
    dtable_concat.insert(dtable_concat.end(), grad.begin(), grad.end());
  }
  const int64_t forward_bad = mismatches(out_sum, ws.download("out"));
  const int64_t backward_bad = mismatches(dtable_concat, ws.download("dtable"));
  const std::string line = fmt::format(
      "[ops] embedding_shard V={} C={} N={} T={} table={} out={} on {}: forward sum {} "
      "mismatches, backward concat {} mismatches (exact) {}",
      r.V, r.C, N, shards, dtype_name(r.table), dtype_name(r.out), backend.name(), forward_bad,
      backward_bad, forward_bad == 0 && backward_bad == 0 ? "OK" : "FAIL");
  std::printf("%s\n", line.c_str());
  EXPECT_EQ(forward_bad, 0) << line;
  EXPECT_EQ(backward_bad, 0) << line;
}

TEST(Ops, EmbeddingShard) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  const std::vector<EmbeddingShardRow> table_rows = {
      {12, 37, {3, 0, 11, 3, 7, 3, 1, 11, 5, 6, 8, 4}, f32, f32},
      {12, 37, {3, 0, 11, 3, 7, 3, 1, 11, 5, 6, 8, 4}, bf16, bf16},
      {6, 20, {5, 5, 0, 2}, f32, bf16},
      {60, 130, spread_ids(300, 60), f32, f32},
      {60, 130, spread_ids(300, 60), bf16, bf16},
  };
  for (const auto& backend : available_backends())
    for (const EmbeddingShardRow& row : with_f16_twins(table_rows, [](EmbeddingShardRow& r) {
           return bf16_to_f16(r.table) | bf16_to_f16(r.out);
         }))
      for (int shards : {1, 2, 3}) check_embedding_shards(*backend, row, shards);
}

// ---- cross_entropy_shard ---------------------------------------------------------------

struct CrossEntropyShardRow {
  int64_t V;
  std::vector<int32_t> targets;
  std::vector<double> loss_mask;  // empty: no mask
  float grad_scale;
  bool in_place;  // dlogits aliases logits
  DType dtype;
  double logit_range = 4.0;
  // The f32 dlogits tolerance against the full op: exp's argument x - lse is rounded once in
  // each op, which costs |x - lse| * 6e-8 relative, so wide logit ranges need more than 1e-6.
  double dlogits_tol_f32 = 1e-6;
};

struct ShardRun {
  std::vector<std::vector<double>> stats, dlogits;  // per shard
  std::vector<double> losses;                       // combined
};

// Runs the shard ops on `backend` and combines the stats in double into losses.
ShardRun run_shards(Backend& backend, const CrossEntropyShardRow& r, const HostTensor& logits,
                    int shards) {
  const int64_t N = logits.shape[0], Vs = r.V / shards;
  const bool masked = !r.loss_mask.empty();
  Workspace ws(backend);
  const Tensor targets = ws.upload("targets", int_tensor(Shape{N}, r.targets));
  const Tensor mask = masked ? ws.upload("mask", HostTensor{DType::f32, Shape{N}, r.loss_mask})
                             : Tensor{};
  ShardRun run;
  for (int t = 0; t < shards; ++t) {
    const std::string s = std::to_string(t);
    const Tensor stats = ws.upload("stats" + s, filled(DType::f32, Shape{N, 3}, kNan));
    backend.cross_entropy_shard_stats(ws.upload("logits" + s, columns(logits, t * Vs, Vs)),
                                      targets, kIgnoreIndex, t * Vs, stats);
    backend.synchronize();
    run.stats.push_back(ws.download("stats" + s));
  }
  std::vector<double> lse(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    double M = -std::numeric_limits<double>::infinity(), S = 0.0, target_logit = 0.0;
    for (int t = 0; t < shards; ++t) M = std::max(M, run.stats[t][n * 3]);
    for (int t = 0; t < shards; ++t) {
      S += run.stats[t][n * 3 + 1] * std::exp(run.stats[t][n * 3] - M);
      target_logit += run.stats[t][n * 3 + 2];
    }
    lse[n] = M + std::log(S);
    const double weight = masked ? r.loss_mask[n] : 1.0;
    const bool ignored = r.targets[n] == kIgnoreIndex || weight == 0.0;
    run.losses.push_back(ignored ? 0.0 : (lse[n] - target_logit) * weight);
  }
  for (double& value : lse) value = round_to_dtype(value, DType::f32);
  const Tensor lse_t = ws.upload("lse", HostTensor{DType::f32, Shape{N}, lse});
  for (int t = 0; t < shards; ++t) {
    const std::string s = std::to_string(t);
    const Tensor dlogits =
        ws.upload("dlogits" + s, r.in_place ? columns(logits, t * Vs, Vs)
                                            : filled(r.dtype, Shape{N, Vs}, kNan));
    const Tensor input = r.in_place ? dlogits : ws["logits" + s];
    backend.cross_entropy_shard_backward(input, targets, masked ? &mask : nullptr, kIgnoreIndex,
                                         t * Vs, lse_t, dlogits, r.grad_scale);
    backend.synchronize();
    run.dlogits.push_back(ws.download("dlogits" + s));
  }
  return run;
}

// Returns the row-major (N, V) concatenation of (N, V / T) column blocks.
std::vector<double> concat_columns(const std::vector<std::vector<double>>& blocks, int64_t N,
                                   int64_t V) {
  const int64_t width = V / static_cast<int64_t>(blocks.size());
  std::vector<double> full(static_cast<size_t>(N * V));
  for (size_t t = 0; t < blocks.size(); ++t)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < width; ++c)
        full[n * V + t * width + c] = blocks[t][n * width + c];
  return full;
}

// Returns max |got - want| / max(|want|, 1).
double loss_error(const std::vector<double>& got, const std::vector<double>& want) {
  double worst = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double error = std::abs(got[i] - want[i]) / std::max(std::abs(want[i]), 1.0);
    worst = std::isnan(error) ? kInf : std::max(worst, error);
  }
  return worst;
}

// Returns the worst error of stats column `column` against cpu-ref's (relative for the sum,
// exact for the max and the target logit, where any difference counts as infinite).
double stats_error(const ShardRun& got, const ShardRun& want, int column) {
  double worst = 0.0;
  for (size_t t = 0; t < want.stats.size(); ++t)
    for (size_t i = column; i < want.stats[t].size(); i += 3) {
      const double a = got.stats[t][i], b = want.stats[t][i];
      const double error = column == 1 ? std::abs(a - b) / std::abs(b) : (a == b ? 0.0 : kInf);
      worst = std::isnan(error) ? kInf : std::max(worst, error);
    }
  return worst;
}

void check_cross_entropy_shards(Backend& backend, Backend& reference,
                                const CrossEntropyShardRow& r, int shards) {
  if (!backend.supports_compute_dtype(r.dtype)) {
    std::printf("[ops] cross_entropy_shard %s on %s skipped: the backend has no %s kernels\n",
                std::string(dtype_name(r.dtype)).c_str(), backend.name().c_str(),
                std::string(dtype_name(r.dtype)).c_str());
    return;
  }
  const int64_t N = static_cast<int64_t>(r.targets.size());
  Rng rng(N * 409 + r.V * 3 + shards);
  const HostTensor logits =
      random_tensor(rng, r.dtype, Shape{N, r.V}, -r.logit_range, r.logit_range);
  const bool masked = !r.loss_mask.empty();

  // The whole-vocabulary op on the same backend.
  Workspace ws(backend);
  const Tensor mask = masked ? ws.upload("mask", HostTensor{DType::f32, Shape{N}, r.loss_mask})
                             : Tensor{};
  const Tensor dlogits =
      ws.upload("dlogits", r.in_place ? logits : filled(r.dtype, Shape{N, r.V}, kNan));
  const Tensor input = r.in_place ? dlogits : ws.upload("logits", logits);
  backend.cross_entropy(input, ws.upload("targets", int_tensor(Shape{N}, r.targets)),
                        masked ? &mask : nullptr, kIgnoreIndex,
                        ws.upload("losses", filled(DType::f32, Shape{N}, kNan)), &dlogits,
                        r.grad_scale);
  backend.synchronize();
  const std::vector<double> want_losses = ws.download("losses");
  const std::vector<double> want_dlogits = ws.download("dlogits");

  const ShardRun run = run_shards(backend, r, logits, shards);
  const double losses_error = loss_error(run.losses, want_losses);
  const double dlogits_error =
      peak_relative_error(concat_columns(run.dlogits, N, r.V), want_dlogits);
  const double dlogits_tol = r.dtype == DType::bf16  ? 8e-3
                             : r.dtype == DType::f16 ? 1e-3
                                                     : r.dlogits_tol_f32;

  // The shard ops against cpu-ref's, at the conformance tables' cross-entropy tolerances.
  const ShardRun ref = &backend == &reference ? run : run_shards(reference, r, logits, shards);
  const double sum_error = stats_error(run, ref, 1);
  const double exact_error = std::max(stats_error(run, ref, 0), stats_error(run, ref, 2));
  const double ref_dlogits_error = peak_relative_error(concat_columns(run.dlogits, N, r.V),
                                                       concat_columns(ref.dlogits, N, r.V));
  // f16: the bf16 tolerance / 8, as in the conformance tables (ops_test.cpp).
  const double ref_tol = r.dtype == DType::bf16 ? 2e-2 : r.dtype == DType::f16 ? 2.5e-3 : 1e-5;

  const bool ok = losses_error <= 1e-6 && dlogits_error <= dlogits_tol && sum_error <= 1e-6 &&
                  exact_error == 0.0 && ref_dlogits_error <= ref_tol;
  const std::string line = fmt::format(
      "[ops] cross_entropy_shard N={} V={} T={}{} grad_scale={}{} {} on {}: losses vs full={} "
      "(tol 1e-06 rel), dlogits vs full={} (tol {}), stats sum vs cpu-ref={} (tol 1e-06), "
      "max/target logit vs cpu-ref {}, dlogits vs cpu-ref={} (tol {}) {}",
      N, r.V, shards, masked ? " mask" : "", r.grad_scale, r.in_place ? " in_place" : "",
      dtype_name(r.dtype), backend.name(), format_error(losses_error),
      format_error(dlogits_error), format_error(dlogits_tol), format_error(sum_error),
      exact_error == 0.0 ? "exact" : "DIFFER", format_error(ref_dlogits_error),
      format_error(ref_tol), ok ? "OK" : "FAIL");
  std::printf("%s\n", line.c_str());
  EXPECT_TRUE(ok) << line;
}

TEST(Ops, CrossEntropyShard) {
  const DType f32 = DType::f32, bf16 = DType::bf16;
  // V = 36 cuts at 12/24 (T = 3) and 18 (T = 2); the targets sit on both sides of every cut.
  const std::vector<int32_t> targets36 = {0, 11, 12, 17, 18, 23, kIgnoreIndex, 24, 35, 5, 30};
  const std::vector<double> mask36 = {1, 1, 0, 1, 0.5, 1, 1, 2, 1, 0, 1};
  // V = 8202 (a multiple of 6 but not of the vector width) splits rows across threads.
  const std::vector<int32_t> targets8202 = {8201, 0, kIgnoreIndex, 4101, 2734, 5467, 17, 8000};
  const std::vector<CrossEntropyShardRow> table_rows = {
      {36, targets36, mask36, 0.25f, false, f32},
      {36, targets36, {}, 1.0f, true, f32},
      {36, targets36, mask36, 0.5f, false, bf16},
      {36, targets36, {}, 0.125f, true, bf16},
      {36, targets36, mask36, 1.0f, false, f32, 30.0, 4e-6},
      {8202, targets8202, {1, 1, 1, 0.5, 1, 0, 1, 1}, 0.5f, false, f32},
      {8202, targets8202, {}, 1.0f, true, f32},
      {8202, targets8202, {}, 0.25f, true, bf16},
  };
  const auto backends = available_backends();
  Backend* reference = nullptr;
  for (const auto& backend : backends)
    if (backend->name() == "cpu-ref") reference = backend.get();
  ASSERT_NE(reference, nullptr);
  for (const auto& backend : backends)
    for (const CrossEntropyShardRow& row :
         with_f16_twins(table_rows, [](CrossEntropyShardRow& r) { return bf16_to_f16(r.dtype); }))
      for (int shards : {1, 2, 3}) check_cross_entropy_shards(*backend, *reference, row, shards);
}

}  // namespace
}  // namespace anvil::test
