// Reference scaled-dot-product attention (GQA; causal, window, document, strided, lines and
// sink masks) and its flash-attention style backward, plus the merge of two key blocks'
// results. Layout (backend.h): q, out (B, Tq, Hq, D); k, v (B, Tk, Hkv, D); lse (B, Hq, Tq)
// f32. Query row t sits at absolute position q_offset + t, key row s at k_offset + s, and the
// mask is evaluated pair by pair from its definition (backend/attention_mask.h). Query head h reads kv head h / (Hq / Hkv). Each score is an f32
// value (double dot product times the scale); softmax sums and output sums run in double. A
// query with no visible key gets out = 0 and lse = -inf, and contributes no gradient.
#include <algorithm>
#include <cmath>
#include <limits>

#include "backend/cpu/reference/reference_ops.h"
#include "backend/cpu/reference/tensor_io.h"
#include "core/error.h"

namespace anvil::cpu_ref {
namespace {

struct AttentionDims {
  int64_t B, Tq, Tk, Hq, Hkv, D;
  int64_t group;  // query heads per kv head
  float scale;
};

// Returns the dimensions of a call Backend has checked.
AttentionDims attention_dims(const Tensor& q, const Tensor& k, const AttentionParams& params) {
  AttentionDims d{q.shape[0], q.shape[1], k.shape[1], q.shape[2], k.shape[2], q.shape[3], 1,
                  params.scale};
  d.group = d.Hq / d.Hkv;
  if (d.scale == 0.0f) d.scale = 1.0f / std::sqrt(static_cast<float>(d.D));
  return d;
}

// Returns whether the query at absolute position t of batch row b may attend to the key at
// absolute position s: the mask rule by definition, then the documents.
bool visible(const AttentionParams& params, int64_t b, int64_t t, int64_t s) {
  if (!position_visible(params.mask_rule(), t, s)) return false;
  if (params.doc_ids) {
    const int32_t* doc = params.doc_ids->i32() + b * params.doc_ids->shape[1];
    if (doc[t] != doc[s]) return false;
  }
  return true;
}

// Returns the f32 score q_t . k_s * scale from rows of D floats.
float score(const float* q_row, const float* k_row, int64_t D, float scale) {
  double dot = 0.0;
  for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(q_row[i]) * k_row[i];
  return static_cast<float>(dot) * scale;
}

// Returns the (T, D) slice of head h of batch row b of a (B, T, H, D) tensor as f32.
std::vector<float> read_head(const Tensor& t, int64_t b, int64_t h) {
  const int64_t T = t.shape[1], H = t.shape[2], D = t.shape[3];
  std::vector<float> head(static_cast<size_t>(T * D));
  for (int64_t s = 0; s < T; ++s)
    for (int64_t i = 0; i < D; ++i) head[s * D + i] = load_float(t, ((b * T + s) * H + h) * D + i);
  return head;
}

// Stores a (T, D) head slice into head h of batch row b of a (B, T, H, D) tensor.
void write_head(const Tensor& t, int64_t b, int64_t h, const std::vector<double>& head) {
  const int64_t T = t.shape[1], H = t.shape[2], D = t.shape[3];
  for (int64_t s = 0; s < T; ++s)
    for (int64_t i = 0; i < D; ++i)
      store_float(t, ((b * T + s) * H + h) * D + i, static_cast<float>(head[s * D + i]));
}

}  // namespace

void attention_forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& lse, const AttentionParams& params) {
  const AttentionDims d = attention_dims(q, k, params);
  const float neg_inf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < d.B * d.Hq; ++bh) {
    const int64_t b = bh / d.Hq, h = bh % d.Hq, kvh = h / d.group;
    const std::vector<float> qh = read_head(q, b, h);
    const std::vector<float> kh = read_head(k, b, kvh);
    const std::vector<float> vh = read_head(v, b, kvh);
    std::vector<double> oh(static_cast<size_t>(d.Tq * d.D), 0.0);
    std::vector<float> scores(static_cast<size_t>(d.Tk));
    for (int64_t t = 0; t < d.Tq; ++t) {
      const int64_t position = params.q_offset + t;
      float row_max = neg_inf;
      for (int64_t s = 0; s < d.Tk; ++s) {
        scores[s] = visible(params, b, position, params.k_offset + s)
                        ? score(&qh[t * d.D], &kh[s * d.D], d.D, d.scale)
                        : neg_inf;
        row_max = std::max(row_max, scores[s]);
      }
      float row_lse = neg_inf;
      if (row_max != neg_inf) {
        double sum = 0.0;
        for (int64_t s = 0; s < d.Tk; ++s)
          if (scores[s] != neg_inf) sum += std::exp(static_cast<double>(scores[s] - row_max));
        row_lse = row_max + static_cast<float>(std::log(sum));
        for (int64_t s = 0; s < d.Tk; ++s) {
          if (scores[s] == neg_inf) continue;
          const float p = std::exp(scores[s] - row_lse);
          for (int64_t i = 0; i < d.D; ++i)
            oh[t * d.D + i] += static_cast<double>(p) * vh[s * d.D + i];
        }
      }
      lse.f32()[(b * d.Hq + h) * d.Tq + t] = row_lse;
    }
    write_head(out, b, h, oh);
  }
}

void attention_backward(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dq, const Tensor& dk,
                        const Tensor& dv, const AttentionParams& params) {
  const AttentionDims d = attention_dims(q, k, params);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  // One task per kv head: it owns dk/dv of that head and dq of the query heads in its group.
#pragma omp parallel for schedule(static)
  for (int64_t bk = 0; bk < d.B * d.Hkv; ++bk) {
    const int64_t b = bk / d.Hkv, kvh = bk % d.Hkv;
    const std::vector<float> kh = read_head(k, b, kvh);
    const std::vector<float> vh = read_head(v, b, kvh);
    std::vector<double> dkh(static_cast<size_t>(d.Tk * d.D), 0.0);
    std::vector<double> dvh(static_cast<size_t>(d.Tk * d.D), 0.0);
    for (int64_t h = kvh * d.group; h < (kvh + 1) * d.group; ++h) {
      const std::vector<float> qh = read_head(q, b, h);
      const std::vector<float> oh = read_head(out, b, h);
      const std::vector<float> doh = read_head(dout, b, h);
      std::vector<double> dqh(static_cast<size_t>(d.Tq * d.D), 0.0);
      for (int64_t t = 0; t < d.Tq; ++t) {
        const float row_lse = lse.f32()[(b * d.Hq + h) * d.Tq + t];
        if (row_lse == neg_inf) continue;
        double delta = 0.0;  // D_t = dout_t . out_t
        for (int64_t i = 0; i < d.D; ++i)
          delta += static_cast<double>(doh[t * d.D + i]) * oh[t * d.D + i];
        for (int64_t s = 0; s < d.Tk; ++s) {
          if (!visible(params, b, params.q_offset + t, params.k_offset + s)) continue;
          const float p = std::exp(score(&qh[t * d.D], &kh[s * d.D], d.D, d.scale) - row_lse);
          double dp = 0.0;
          for (int64_t i = 0; i < d.D; ++i)
            dp += static_cast<double>(doh[t * d.D + i]) * vh[s * d.D + i];
          const double ds = p * (dp - delta) * d.scale;
          for (int64_t i = 0; i < d.D; ++i) {
            dqh[t * d.D + i] += ds * kh[s * d.D + i];
            dkh[s * d.D + i] += ds * qh[t * d.D + i];
            dvh[s * d.D + i] += static_cast<double>(p) * doh[t * d.D + i];
          }
        }
      }
      write_head(dq, b, h, dqh);
    }
    write_head(dk, b, kvh, dkh);
    write_head(dv, b, kvh, dvh);
  }
}

void attention_merge(const Tensor& out, const Tensor& lse, const Tensor& part_out,
                     const Tensor& part_lse) {
  const int64_t B = out.shape[0], Tq = out.shape[1], Hq = out.shape[2], D = out.shape[3];
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hq; ++h)
      for (int64_t t = 0; t < Tq; ++t) {
        float& row_lse = lse.f32()[(b * Hq + h) * Tq + t];
        const float other = part_lse.f32()[(b * Hq + h) * Tq + t];
        if (other == neg_inf) continue;  // the block saw nothing: out and lse stay
        const double merged =
            row_lse == neg_inf
                ? other
                : std::max<double>(row_lse, other) +
                      std::log1p(std::exp(-std::abs(static_cast<double>(row_lse) - other)));
        const double keep = row_lse == neg_inf ? 0.0 : std::exp(row_lse - merged);
        const double take = std::exp(other - merged);
        for (int64_t i = 0; i < D; ++i) {
          const int64_t at = ((b * Tq + t) * Hq + h) * D + i;
          store_float(out, at, static_cast<float>(keep * load_float(out, at) +
                                                  take * load_float(part_out, at)));
        }
        row_lse = static_cast<float>(merged);
      }
}

}  // namespace anvil::cpu_ref
