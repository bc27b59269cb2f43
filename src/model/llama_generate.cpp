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

// Runs causal attention of new queries q (n, Hq, D) at positions [start, end) over cached keys
// and values (max_len, Hkv, D) of one batch row, writing out (n, Hq, D). The backend op takes
// equal query and key lengths, so the queries sit at their positions inside the cache's query
// window (earlier rows hold finite leftovers whose outputs are ignored) and only rows
// [start, end) of the result are kept.
void cached_attention(Backend& backend, const KvCache& cache, const Tensor& q,
                      const Tensor& cached_k, const Tensor& cached_v, int start, int end,
                      const Tensor& out) {
  const Tensor window = cache.query_window()[0];  // (max_len, Hq, D)
  backend.copy(window.slice(start, end), q);
  const auto prefix = [end](const Tensor& t) {
    return t.slice(0, end).view(Shape{1, end, t.shape[1], t.shape[2]});
  };
  const Tensor lse = cache.lse_window().flat(0, int64_t{end} * cache.lse_window().shape[1]);
  const Tensor output = cache.output_window()[0];
  AttentionParams params;
  params.causal = true;
  backend.attention_forward(prefix(window), prefix(cached_k), prefix(cached_v), prefix(output),
                            lse.view(Shape{1, cache.lse_window().shape[1], end}), params);
  backend.copy(out, output.slice(start, end));
}

}  // namespace

void LlamaModel::forward_step(const Tensor& tokens, KvCache& cache, const Tensor& logits) {
  const int start = cache.length();
  const StepDims dims = prepare_inputs(tokens, nullptr, nullptr, nullptr, start);
  cache.check_append(dims.batch, dims.seq);
  check_shape(logits, Shape{dims.batch, config_.vocab_size}, "logits");
  check_dtype(logits, DType::f32, "logits");
  const BlockContext ctx = make_context(dims);
  const int64_t n = dims.rows(), c = config_.dim;
  const int end = start + dims.seq;

  call_hook(&GroupHooks::before_forward, kEmbeddingGroup);
  embedding_block_forward(ctx, weights_.embedding, tokens_view_,
                          leading_rows(acts_.residual[0], n, c));
  call_hook(&GroupHooks::after_forward, kEmbeddingGroup);
  for (int l = 0; l < config_.n_layers; ++l) {
    call_hook(&GroupHooks::before_forward, layer_group(l));
    LayerActivations a = acts_.layers[0].sized(config_, dims);
    const Tensor x = leading_rows(acts_.residual[l], n, c);
    attention_qkv_forward(ctx, weights_.layers[l], x, a);
    for (int b = 0; b < dims.batch; ++b) {
      const Tensor cached_k = cache.keys(l)[b];
      const Tensor cached_v = cache.values(l)[b];
      backend_->copy(cached_k.slice(start, end), a.k[b]);
      backend_->copy(cached_v.slice(start, end), a.v[b]);
      cached_attention(*backend_, cache, a.q[b], cached_k, cached_v, start, end, a.attn_out[b]);
    }
    attention_output_forward(ctx, weights_.layers[l], x, a);
    mlp_block_forward(ctx, weights_.layers[l], a, leading_rows(acts_.residual[l + 1], n, c));
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
  const int head = head_group(config_);
  call_hook(&GroupHooks::before_forward, head);
  head_block_forward_logits(head_ctx, weights_, last, acts_, logits);
  call_hook(&GroupHooks::after_forward, head);
}

}  // namespace anvil
