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
  ANVIL_CHECK(!options_.tp.enabled() && !options_.cp.enabled(),
              "[model] KV-cache decoding needs the whole model and whole sequences; it is not "
              "available under tensor or context parallelism");
  const int start = cache.length();
  const StepDims dims = prepare_inputs(tokens, nullptr, nullptr, nullptr, start);
  cache.check_append(dims.batch, dims.seq);
  check_shape(logits, Shape{dims.batch, config_.vocab_size}, "logits");
  check_dtype(logits, DType::f32, "logits");
  const BlockContext ctx = make_context(dims);
  const int64_t n = dims.rows(), c = config_.dim;
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

  // Gather each row's last position, then norm + head on those B rows only.
  const Tensor hidden = leading_rows(acts_.residual[config_.n_layers], n, c);
  const Tensor last = leading_rows(acts_.last_hidden, dims.batch, c);
  for (int b = 0; b < dims.batch; ++b) {
    const int64_t row = int64_t{b} * dims.seq + dims.seq - 1;
    backend_->copy(last.slice(b, b + 1), hidden.slice(row, row + 1));
  }
  BlockContext head_ctx = ctx;
  head_ctx.dims = StepDims{dims.batch, 1};
  head_ctx.local_rows = dims.batch;
  const int head = head_group(config_);
  begin_forward(head);
  head_block_forward_logits(head_ctx, compute_weights(), last, acts_, logits);
  call_hook(&GroupHooks::after_forward, head);
}

}  // namespace anvil
