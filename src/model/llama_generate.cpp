// LlamaModel::forward_step: incremental decoding with a KvCache. New tokens are projected as
// in training, their keys and values are appended to each row's cache block, and attention
// runs per row over all cached positions, so no earlier position is projected or run through
// an MLP again. Only each row's last position goes through the final norm and the lm head.
#include "core/error.h"
#include "model/attention_block.h"
#include "model/head_block.h"
#include "model/llama.h"
#include "model/mlp_block.h"

namespace anvil {

namespace {

// Runs attention (the layer's mask `params`, no documents) of new queries q (n, Hq, D) at
// positions [start, start + n) of one batch row over its cached keys and values (max_len, Hkv,
// D), whose first start + n rows are filled, writing out (n, Hq, D). The queries carry their absolute positions (q_offset), so
// the work is O(n * (start + n)): each decoding step attends once to the cache.
void cached_attention(Backend& backend, const KvCache& cache, AttentionParams params,
                      const Tensor& q, const Tensor& cached_k, const Tensor& cached_v, int start,
                      const Tensor& out) {
  const int64_t n = q.shape[0], heads = q.shape[1], end = start + n;
  const auto batch_of_one = [](const Tensor& t, int64_t rows) {
    return t.slice(0, rows).view(Shape{1, rows, t.shape[1], t.shape[2]});
  };
  const Tensor lse = cache.lse_scratch().flat(0, heads * n).view(Shape{1, heads, n});
  params.q_offset = start;
  backend.attention_forward(batch_of_one(q, n), batch_of_one(cached_k, end),
                            batch_of_one(cached_v, end), batch_of_one(out, n), lse, params);
}

}  // namespace

void LlamaModel::forward_step(const Tensor& tokens, KvCache& cache, const Tensor& logits) {
  ANVIL_CHECK(tokens.shape.rank() == 2, "[model] tokens must be a (B, T) tensor, got {}",
              tokens.shape.str());
  const int64_t batch = tokens.shape[0], n = tokens.shape[1];
  std::vector<int64_t> last_positions;
  for (int64_t b = 0; b < batch; ++b) last_positions.push_back(b * n + n - 1);
  forward_step(tokens, cache, last_positions, logits);
}

void LlamaModel::forward_step(const Tensor& tokens, KvCache& cache,
                              std::span<const int64_t> positions, const Tensor& logits) {
  ANVIL_CHECK(!options_.tp.enabled() && !options_.cp.enabled(),
              "[model] KV-cache decoding needs the whole model and whole sequences; it is not "
              "available under tensor or context parallelism");
  const int start = cache.length();
  const StepDims dims = prepare_inputs(tokens, nullptr, nullptr, nullptr, start);
  cache.check_append(dims.batch, dims.seq);
  const int64_t n = dims.rows(), c = config_.dim;
  const auto selected = static_cast<int64_t>(positions.size());
  ANVIL_CHECK(selected <= n, "[model] {} logit positions requested of {} new tokens", selected, n);
  for (const int64_t p : positions) {
    ANVIL_CHECK(p >= 0 && p < n, "[model] logit position {} outside the {} new tokens", p, n);
  }
  if (selected > 0) {
    check_shape(logits, Shape{selected, config_.vocab_size}, "logits");
    check_dtype(logits, DType::f32, "logits");
  }
  const BlockContext ctx = make_context(dims);
  const int end = start + dims.seq;

  begin_forward(kEmbeddingGroup);
  embedding_block_forward(ctx, compute_weights().embedding, tokens_view_,
                          leading_rows(acts_.residual[0], n, c));
  call_hook(&GroupHooks::after_forward, kEmbeddingGroup);
  for (int l = 0; l < config_.n_layers; ++l) {
    begin_forward(layer_group(l));
    LayerActivations a = acts_.layers[0].sized(config_, dims);
    const Tensor x = leading_rows(acts_.residual[l], n, c);
    const LoraLayerStep* lora = lora_step(l, dims, 0, false);
    attention_qkv_forward(ctx, compute_weights().layers[l], x, a, lora);
    for (int b = 0; b < dims.batch; ++b) {
      const Tensor cached_k = cache.keys(l)[b];
      const Tensor cached_v = cache.values(l)[b];
      backend_->cast(a.k[b], cached_k.slice(start, end));
      backend_->cast(a.v[b], cached_v.slice(start, end));
      cached_attention(*backend_, cache, ctx.attention(l), a.q[b], cached_k, cached_v, start,
                       a.attn_out[b]);
    }
    attention_output_forward(ctx, compute_weights().layers[l], x, a, lora);
    mlp_block_forward(ctx, compute_weights().layers[l], a,
                      leading_rows(acts_.residual[l + 1], n, c), lora);
    call_hook(&GroupHooks::after_forward, layer_group(l));
  }
  cache.commit_append(dims.batch, dims.seq);
  const int head = head_group(config_);
  if (selected == 0) {
    // No logits wanted (a prefill), but observers see every pass visit the head as usual.
    begin_forward(head);
    call_hook(&GroupHooks::after_forward, head);
    return;
  }

  // Gather the chosen positions, then norm + head on those rows only. The embeddings'
  // residual[0] is free by now and holds at least n rows.
  const Tensor hidden = leading_rows(acts_.residual[config_.n_layers], n, c);
  const Tensor gathered = leading_rows(acts_.residual[0], selected, c);
  for (int64_t i = 0; i < selected; ++i) {
    backend_->copy(gathered.slice(i, i + 1), hidden.slice(positions[i], positions[i] + 1));
  }
  BlockContext head_ctx = ctx;
  head_ctx.dims = StepDims{static_cast<int>(selected), 1};
  head_ctx.local_rows = selected;
  begin_forward(head);
  head_block_forward_logits(head_ctx, compute_weights(), gathered, acts_, logits);
  call_hook(&GroupHooks::after_forward, head);
}

}  // namespace anvil
