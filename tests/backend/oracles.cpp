// Double-precision oracles for the op driver (see oracles.h). Plain index arithmetic on flat
// row-major arrays, deliberately structured differently from the reference (no transposed
// copies, two-pass softmax over explicit masks) so that the two definitions check each other.
#include "oracles.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace anvil::test::f64 {

Vec matmul(const Vec& a, const Vec& b, const Vec* c0, const MatmulDims& d, double alpha,
           double beta) {
  Vec c(static_cast<size_t>(d.batches * d.M * d.N), 0.0);
  for (int64_t p = 0; p < d.batches; ++p) {
    const double* ap = a.data() + p * d.M * d.K;
    const double* bp = b.data() + (d.shared_b ? 0 : p * d.K * d.N);
    for (int64_t i = 0; i < d.M; ++i) {
      for (int64_t j = 0; j < d.N; ++j) {
        double sum = 0.0;
        for (int64_t k = 0; k < d.K; ++k) {
          const double a_ik = d.transpose_a ? ap[k * d.M + i] : ap[i * d.K + k];
          const double b_kj = d.transpose_b ? bp[j * d.K + k] : bp[k * d.N + j];
          sum += a_ik * b_kj;
        }
        const int64_t at = (p * d.M + i) * d.N + j;
        c[at] = alpha * sum + (beta != 0.0 ? beta * (*c0)[at] : 0.0);
      }
    }
  }
  return c;
}

Vec embedding(const Vec& ids, const Vec& table, int64_t C) {
  Vec out;
  for (double id : ids) {
    const auto row = table.begin() + static_cast<int64_t>(id) * C;
    out.insert(out.end(), row, row + C);
  }
  return out;
}

void rmsnorm(const Vec& x, const Vec& weight, int64_t N, int64_t C, double eps, Vec& out,
             Vec& rstd) {
  out.assign(x.size(), 0.0);
  rstd.assign(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    double mean_sq = 0.0;
    for (int64_t c = 0; c < C; ++c) mean_sq += x[n * C + c] * x[n * C + c] / C;
    rstd[n] = 1.0 / std::sqrt(mean_sq + eps);
    for (int64_t c = 0; c < C; ++c) out[n * C + c] = x[n * C + c] * rstd[n] * weight[c];
  }
}

namespace {

// Returns the RoPE inverse frequencies, following transformers' rope initialisation: the
// default rule 1 / theta^(2i/D), then for "llama3" the three wavelength bands. Every step is
// an f32 operation because that is what PyTorch evaluates.
std::vector<float> inv_freq_like_pytorch(int64_t D, const RopeParams& p) {
  std::vector<float> inv(static_cast<size_t>(D / 2));
  for (int64_t i = 0; i < D / 2; ++i)
    inv[i] = 1.0f / std::pow(p.theta, static_cast<float>(2 * i) / static_cast<float>(D));
  if (p.scaling_factor == 0.0f) return inv;
  const double original = p.original_max_position;
  for (float& f : inv) {
    const float wavelen = static_cast<float>(2 * std::numbers::pi) / f;
    const bool high_band = wavelen < static_cast<float>(original / p.high_freq_factor);
    const bool low_band = wavelen > static_cast<float>(original / p.low_freq_factor);
    if (low_band) {
      f = f / p.scaling_factor;
    } else if (!high_band) {
      const float smooth = (static_cast<float>(original) / wavelen - p.low_freq_factor) /
                           static_cast<float>(p.high_freq_factor - p.low_freq_factor);
      f = (1.0f - smooth) * f / p.scaling_factor + smooth * f;
    }
  }
  return inv;
}

}  // namespace

Vec rope(const Vec& x, const Vec& positions, int64_t B, int64_t T, int64_t H, int64_t D,
         const RopeParams& params) {
  const std::vector<float> inv = inv_freq_like_pytorch(D, params);
  const int64_t half = D / 2;
  Vec out(x.size());
  for (int64_t bt = 0; bt < B * T; ++bt) {
    for (int64_t h = 0; h < H; ++h) {
      const int64_t base = (bt * H + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(positions[bt]) * inv[i];
        const double c = std::cos(angle), s = std::sin(angle);
        out[base + i] = x[base + i] * c - x[base + i + half] * s;
        out[base + i + half] = x[base + i + half] * c + x[base + i] * s;
      }
    }
  }
  return out;
}

bool attention_visible(const AttentionSpec& spec, int64_t b, int64_t t, int64_t s) {
  if (spec.causal && s > t) return false;
  if (spec.doc_ids) {
    const int64_t len = spec.doc_len > 0 ? spec.doc_len : spec.key_rows();
    if ((*spec.doc_ids)[b * len + t] != (*spec.doc_ids)[b * len + s]) return false;
  }
  if (s < spec.sinks) return true;
  if (spec.window > 0 && std::abs(t - s) >= spec.window) return false;
  if (spec.pattern == SparsePattern::dense) return true;
  const int64_t distance = std::abs(t / spec.segment - s / spec.segment);
  if (spec.pattern == SparsePattern::strided) return distance % spec.stride == 0;
  // lines: the own segment and the segments 1, 2, 4, 8, ... away.
  if (distance == 0) return true;
  for (int64_t power = 1; power <= distance; power *= 2)
    if (power == distance) return true;
  return false;
}

void attention(const Vec& q, const Vec& k, const Vec& v, const AttentionSpec& s, Vec& out,
               Vec& lse) {
  const double scale = s.scale != 0.0 ? s.scale : 1.0 / std::sqrt(static_cast<double>(s.D));
  const int64_t Tk = s.key_rows();
  out.assign(q.size(), 0.0);
  lse.assign(static_cast<size_t>(s.B * s.Hq * s.T), 0.0);
  auto q_at = [&](int64_t b, int64_t t, int64_t h, int64_t i) {
    return q[((b * s.T + t) * s.Hq + h) * s.D + i];
  };
  auto kv_index = [&](int64_t b, int64_t t, int64_t h, int64_t i) {
    return ((b * Tk + t) * s.Hkv + h) * s.D + i;
  };
  for (int64_t b = 0; b < s.B; ++b) {
    for (int64_t h = 0; h < s.Hq; ++h) {
      const int64_t kvh = h * s.Hkv / s.Hq;
      for (int64_t t = 0; t < s.T; ++t) {
        const int64_t position = s.q_offset + t;
        std::vector<int64_t> keys;
        for (int64_t j = 0; j < Tk; ++j)
          if (attention_visible(s, b, position, s.k_offset + j)) keys.push_back(j);
        const int64_t lse_at = (b * s.Hq + h) * s.T + t;
        if (keys.empty()) {
          lse[lse_at] = -std::numeric_limits<double>::infinity();
          continue;
        }
        std::vector<double> logits;
        for (int64_t j : keys) {
          double dot = 0.0;
          for (int64_t i = 0; i < s.D; ++i) dot += q_at(b, t, h, i) * k[kv_index(b, j, kvh, i)];
          logits.push_back(dot * scale);
        }
        const double top = *std::max_element(logits.begin(), logits.end());
        double total = 0.0;
        for (double l : logits) total += std::exp(l - top);
        lse[lse_at] = top + std::log(total);
        for (size_t n = 0; n < keys.size(); ++n) {
          const double weight = std::exp(logits[n] - lse[lse_at]);
          for (int64_t i = 0; i < s.D; ++i)
            out[((b * s.T + t) * s.Hq + h) * s.D + i] += weight * v[kv_index(b, keys[n], kvh, i)];
        }
      }
    }
  }
}

Vec swiglu(const Vec& gate, const Vec& up) {
  Vec out(gate.size());
  for (size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

Vec cross_entropy(const Vec& logits, const Vec& targets, const Vec* mask, int64_t N, int64_t V,
                  int ignore_index) {
  Vec losses(static_cast<size_t>(N), 0.0);
  for (int64_t n = 0; n < N; ++n) {
    const double weight = mask ? (*mask)[n] : 1.0;
    const int64_t target = static_cast<int64_t>(targets[n]);
    if (target == ignore_index || weight == 0.0) continue;
    const double* row = logits.data() + n * V;
    const double top = *std::max_element(row, row + V);
    double total = 0.0;
    for (int64_t j = 0; j < V; ++j) total += std::exp(row[j] - top);
    losses[n] = weight * (top + std::log(total) - row[target]);
  }
  return losses;
}

}  // namespace anvil::test::f64
