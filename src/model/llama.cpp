// LlamaModel orchestration: input staging, the layer loop, checkpointed recomputation, the
// head, loss reduction and group hooks. Block math lives in the *_block.cpp files.
#include "model/llama.h"

#include <algorithm>

#include "backend/op_rules.h"
#include "core/counter_hash.h"
#include "core/error.h"
#include "model/attention_block.h"
#include "model/head_block.h"
#include "model/mlp_block.h"

namespace anvil {

namespace {

// The head's logits chunk by default: at least kMinLogitsChunkRows rows, so the lm-head GEMMs
// run full tiles and the f32 head gradient is read and written once per 1024 rows (not once
// per 65 at a 128k vocabulary), and more rows while the chunk stays within 2^23 elements
// (4096 rows of a 2k vocabulary). At a 128k vocabulary in bf16 that is 256 MiB, which `anvil
// plan` counts as activations; the (N, V) logits of a long batch never exist at once.
constexpr int64_t kLogitsChunkElements = int64_t{1} << 23;
constexpr int64_t kMinLogitsChunkRows = 1024;

// Returns t on the backend's device as a flat (N) tensor: t itself when it already lives
// there, otherwise `staging` after a host-to-device copy.
Tensor on_device(Backend& backend, const Tensor& t, const Tensor& staging) {
  const int64_t n = t.numel();
  if (t.device == backend.device()) return t.view(Shape{n});
  ANVIL_CHECK(t.device.is_cpu(), "[model] input tensor lives on another device");
  const Tensor dst = staging.flat(0, n);
  backend.copy_from_host(dst, t.data);
  return dst;
}

// Ids and targets are checked here, on the host, before they are uploaded (op_rules.h): a
// device kernel never reads them back to check, and under tensor parallelism no rank sees the
// whole vocabulary. Inputs already on the device are the caller's to check.
void check_token_ids(const Tensor& ids, int64_t vocab) {
  if (ids.device.is_cpu()) anvil::check_token_ids("model", ids.i32(), ids.numel(), vocab);
}

void check_targets(const Tensor& targets, int64_t vocab) {
  if (targets.device.is_cpu())
    anvil::check_targets("model", targets.i32(), targets.numel(), vocab, kIgnoreIndex);
}

void check_batch_tensor(const Tensor& t, const Shape& shape, DType dtype, const char* what) {
  ANVIL_CHECK(t.defined(), "[model] {} is missing", what);
  check_shape(t, shape, what);
  check_dtype(t, dtype, what);
}

}  // namespace

ModelOptions LlamaModel::resolved_options(const LlamaConfig& config, ModelOptions options) {
  if (options.max_seq == 0) options.max_seq = config.max_seq_len / std::max(1, options.cp.size);
  return options;
}

DType LlamaModel::frozen_base_dtype(const ModelOptions& options) {
  if (!options.lora.enabled()) return DType::f32;
  return options.lora_base_dtype.value_or(options.compute_dtype);
}

void LlamaModel::check_options(const LlamaConfig& shard_config, const ModelOptions& options) {
  shard_config.validate();
  const TensorParallel& tp = options.tp;
  ANVIL_CHECK(tp.rank >= 0 && tp.rank < tp.size, "[model] tp rank {} outside 0..{}", tp.rank,
              tp.size - 1);
  ANVIL_CHECK(!tp.sequence_parallel || tp.enabled(),
              "[model] sequence parallelism splits the sequence over tp ranks; it needs tp > 1");
  const ContextParallel& cp = options.cp;
  ANVIL_CHECK(cp.rank >= 0 && cp.rank < cp.size, "[model] cp rank {} outside 0..{}", cp.rank,
              cp.size - 1);
  ANVIL_CHECK(options.compute_dtype == DType::f32 || options.compute_dtype == DType::bf16 ||
                  options.compute_dtype == DType::f16,
              "[model] compute dtype must be f32, bf16 or f16, got {}",
              dtype_name(options.compute_dtype));
  ANVIL_CHECK(options.max_batch >= 1, "[model] max_batch must be at least 1, got {}",
              options.max_batch);
  ANVIL_CHECK(options.max_seq >= 1 &&
                  int64_t{options.max_seq} * cp.size <= shard_config.max_seq_len,
              "[model] max_seq {} (x cp {}) must be in 1..max_seq_len ({})", options.max_seq,
              cp.size, shard_config.max_seq_len);
  ANVIL_CHECK(options.logits_chunk_rows >= 0, "[model] logits_chunk_rows must be >= 0, got {}",
              options.logits_chunk_rows);
  if (options.lora.enabled()) {
    validate_lora_options(options.lora);
    const DType base_dtype = frozen_base_dtype(options);
    ANVIL_CHECK(base_dtype == DType::f32 || base_dtype == DType::bf16,
                "[model] a frozen LoRA base is held in f32 or bf16, got {}",
                dtype_name(base_dtype));
    ANVIL_CHECK(base_dtype == DType::f32 || options.compute_dtype == DType::bf16,
                "[model] a bf16 LoRA base is a GEMM operand as it is, so the model must compute "
                "in bf16 (compute dtype is {})",
                dtype_name(options.compute_dtype));
  } else {
    ANVIL_CHECK(!options.lora_base_dtype, "[model] lora_base_dtype is set, but LoRA is off");
  }
  // Dropout masks are drawn per local row; the cp ranks' rows would share them.
  ANVIL_CHECK(!cp.enabled() || !options.lora.enabled() || options.lora.dropout == 0.0f,
              "[model] LoRA dropout is not supported under context parallelism yet (cp = {}); "
              "set lora.dropout = 0",
              cp.size);
}

void LlamaModel::carve_arena(Arena& arena, const LlamaConfig& shard_config,
                             const ModelOptions& options, ModelActivations& acts,
                             LoraActivations& lora, Tensor& norm_grad_sink,
                             VocabParallelScratch& vocab_parallel) {
  const int64_t max_rows = int64_t{options.max_batch} * options.max_seq;
  int64_t chunk = options.logits_chunk_rows;
  if (chunk == 0)
    chunk = std::max(kMinLogitsChunkRows, kLogitsChunkElements / shard_config.vocab_size);
  chunk = std::min(chunk, max_rows);
  const int layer_sets = options.activation_checkpointing ? 1 : shard_config.n_layers;
  const TensorParallel& tp = options.tp;
  acts.carve(arena, shard_config, options.max_batch, max_rows, layer_sets, chunk,
             options.compute_dtype, tp.splits_sequence() ? tp.size : 1);
  if (options.lora.enabled()) {
    lora.carve(arena, shard_config, options.lora, options.compute_dtype, max_rows, layer_sets);
    norm_grad_sink = arena.take(DType::f32, Shape{shard_config.dim});
  }
  if (tp.enabled()) vocab_parallel.carve(arena, chunk, tp.size);
}

LlamaModel::LlamaModel(const LlamaConfig& config, Backend& backend, const ModelOptions& options)
    : full_config_(config),
      config_(tp_shard_config(config, options.tp.size)),
      backend_(&backend),
      options_(resolved_options(config_, options)) {
  check_options(config_, options_);
  const TensorParallel& tp = options_.tp;
  ANVIL_CHECK(!tp.enabled() || tp.ops != nullptr,
              "[model] tensor parallelism needs the tp collectives (ModelOptions::tp.ops)");
  const ContextParallel& cp = options_.cp;
  ANVIL_CHECK(!cp.enabled() || cp.ops != nullptr,
              "[model] context parallelism needs the ring exchange (ModelOptions::cp.ops)");
  ANVIL_CHECK(backend.supports_compute_dtype(options_.compute_dtype),
              "[model] compute dtype {} has no kernels on backend {}",
              dtype_name(options_.compute_dtype), backend.name());
  const bool lora = options_.lora.enabled();
  const DType base_dtype = frozen_base_dtype(options_);
  layout_ = make_llama_layout(config_, options_.decay_embeddings);
  full_layout_ =
      tp.enabled() ? make_llama_layout(full_config_, options_.decay_embeddings) : layout_;
  // With LoRA the base is frozen (no gradients) and allocate_weights/gradients are the
  // adapters'; the base's own buffers follow allocate_frozen.
  params_ = ParameterSet(layout_, backend,
                         lora ? MemoryCategory::frozen_weights : MemoryCategory::trainable_weights,
                         lora ? options_.allocate_frozen : options_.allocate_weights, base_dtype);
  grads_ = ParameterSet(layout_, backend, MemoryCategory::gradients,
                        options_.allocate_gradients && !lora);
  weights_ = llama_weight_views(config_, params_);
  grad_views_ = llama_weight_views(config_, grads_);
  if (base_dtype == DType::bf16) {
    bf16_base_ = Bf16BaseViews(config_, backend);
  } else if (options_.compute_dtype != DType::f32) {
    compute_ = ComputeWeights(config_, layout_, backend, options_.compute_dtype,
                              options_.allocate_compute_copies || lora);
  }
  if (lora) {
    lora_ = LoraAdapters(config_, options_.lora, backend, options_.compute_dtype,
                         options_.allocate_weights, options_.allocate_gradients);
    full_lora_layout_ = tp.enabled() ? make_lora_layout(full_config_, options_.lora)
                                     : lora_.parameters().shared_layout();
  }

  const int64_t max_rows = int64_t{options_.max_batch} * options_.max_seq;
  arena_.build(backend, MemoryCategory::activations, [&](Arena& arena) {
    carve_arena(arena, config_, options_, acts_, lora_.activations(), norm_grad_sink_,
                vocab_parallel_);
  });
  if (cp.enabled()) {
    cp_scratch_ = std::make_unique<ContextParallelScratch>(
        backend, config_, cp.size, options_.max_batch, options_.max_seq, options_.compute_dtype);
  }
  if (config_.attention_bias) {
    if (options_.compute_dtype == DType::f32) {
      const std::vector<float> ones(static_cast<size_t>(max_rows), 1.0f);
      backend.copy_from_host(acts_.ones, ones.data());
    } else {
      const std::vector<uint16_t> ones(static_cast<size_t>(max_rows), float_to_bf16(1.0f));
      backend.copy_from_host(acts_.ones, ones.data());
    }
  }
  host_positions_.resize(static_cast<size_t>(max_rows));
  host_targets_.resize(static_cast<size_t>(max_rows));
  host_mask_.resize(static_cast<size_t>(max_rows));
}

void LlamaModel::init_weights(uint64_t seed) {
  ANVIL_CHECK(!options_.tp.enabled(), "[model] under tensor parallelism the parallel layer "
              "initialises each shard (DataParallelEngine::init_weights)");
  if (params_.dtype() == DType::f32) {
    init_llama_weights(config_, params_, *backend_, seed);
    return;
  }
  std::vector<float> host;
  for (int g = 0; g < layout_->group_count(); ++g) {
    host.assign(static_cast<size_t>(layout_->group_numel(g)), 0.0f);
    init_llama_group(config_, *layout_, g, seed, host.data());
    write_f32_values(*backend_, params_.group(g), host.data());
  }
}

void LlamaModel::bind_weights(int group, const Tensor& storage) {
  params_.bind(group, storage);
  refresh_group_views(config_, params_, group, weights_);
}

void LlamaModel::bind_compute_weights(int group, const Tensor& compute, const Tensor& f32) {
  compute_.bind(group, compute, f32);
}

void LlamaModel::bind_gradients(int group, const Tensor& storage) {
  grads_.bind(group, storage);
  refresh_group_views(config_, grads_, group, grad_views_);
}

void LlamaModel::bind_trainable_weights(int group, const Tensor& storage) {
  if (lora_.enabled()) {
    lora_.bind_weights(group, storage);
  } else {
    bind_weights(group, storage);
  }
}

void LlamaModel::bind_trainable_gradients(int group, const Tensor& storage) {
  if (lora_.enabled()) {
    lora_.bind_gradients(group, storage);
  } else {
    bind_gradients(group, storage);
  }
}

StepDims LlamaModel::prepare_inputs(const Tensor& tokens, const Tensor* targets,
                                    const Tensor* loss_mask, const Tensor* doc_ids,
                                    int position_offset) {
  ANVIL_CHECK(tokens.defined() && tokens.shape.rank() == 2,
              "[model] tokens must be a (B, T) tensor, got {}", tokens.shape.str());
  check_dtype(tokens, DType::i32, "tokens");
  const StepDims dims{static_cast<int>(tokens.shape[0]), static_cast<int>(tokens.shape[1])};
  ANVIL_CHECK(dims.batch >= 1 && dims.batch <= options_.max_batch,
              "[model] batch size {} outside 1..max_batch ({})", dims.batch, options_.max_batch);
  ANVIL_CHECK(dims.seq >= 1 && dims.seq <= options_.max_seq,
              "[model] sequence length {} outside 1..max_seq ({})", dims.seq, options_.max_seq);
  const Shape bt{dims.batch, dims.seq};
  check_token_ids(tokens, full_config_.vocab_size);
  ANVIL_CHECK(!options_.tp.splits_sequence() || dims.rows() % options_.tp.size == 0,
              "[model] sequence parallelism splits the {} x {} = {} positions of a batch over {} "
              "tp ranks, which does not divide them",
              dims.batch, dims.seq, dims.rows(), options_.tp.size);
  tokens_view_ = on_device(*backend_, tokens, acts_.tokens);
  if (targets) {
    check_batch_tensor(*targets, bt, DType::i32, "targets");
    check_targets(*targets, full_config_.vocab_size);
    targets_view_ = on_device(*backend_, *targets, acts_.targets);
  }
  mask_view_ = Tensor();
  if (loss_mask) {
    check_batch_tensor(*loss_mask, bt, DType::f32, "loss_mask");
    mask_view_ = on_device(*backend_, *loss_mask, acts_.loss_mask);
  }
  const ContextParallel& cp = options_.cp;
  ANVIL_CHECK(!cp.enabled() || dims.seq % 2 == 0,
              "[model] under context parallelism a rank holds two equal chunks of each sequence, "
              "so its rows per sample must be even, got {}",
              dims.seq);
  doc_ids_view_ = Tensor();
  if (doc_ids) {
    // Under context parallelism the ids cover whole sequences (attention compares absolute
    // positions across every rank's chunks).
    const Shape whole{dims.batch, int64_t{dims.seq} * cp.size};
    check_batch_tensor(*doc_ids, whole, DType::i32, "doc_ids");
    const Tensor staging = cp.enabled() ? cp_scratch_->doc_ids.as(DType::i32, Shape{whole.numel()})
                                        : acts_.doc_ids;
    doc_ids_view_ = on_device(*backend_, *doc_ids, staging).view(whole);
  }
  if (dims.batch != positions_dims_.batch || dims.seq != positions_dims_.seq ||
      position_offset != positions_offset_) {
    for (int b = 0; b < dims.batch; ++b) {
      for (int t = 0; t < dims.seq; ++t) {
        const int64_t position = cp.enabled() ? cp_global_position(cp, t, dims.seq) : t;
        host_positions_[static_cast<size_t>(b) * dims.seq + t] =
            position_offset + static_cast<int32_t>(position);
      }
    }
    backend_->copy_from_host(acts_.positions.flat(0, dims.rows()), host_positions_.data());
    positions_dims_ = dims;
    positions_offset_ = position_offset;
  }
  return dims;
}

BlockContext LlamaModel::make_context(StepDims dims) const {
  BlockContext ctx;
  ctx.backend = backend_;
  ctx.config = &config_;
  ctx.dims = dims;
  ctx.positions = acts_.positions.flat(0, dims.rows()).view(Shape{dims.batch, dims.seq});
  ctx.doc_ids = doc_ids_view_;
  ctx.attention_schedule = options_.attention;
  ctx.ones = acts_.ones;
  ctx.rope = config_.rope_params();
  ctx.norm_grad_sink = norm_grad_sink_;
  ctx.tp = options_.tp;
  ctx.cp = options_.cp;
  ctx.cp_scratch = cp_scratch_.get();
  ctx.local_rows = dims.rows();
  if (options_.tp.splits_sequence()) {
    ctx.local_rows = dims.rows() / options_.tp.size;
    ctx.row_begin = options_.tp.rank * ctx.local_rows;
    ctx.sp_gathered = acts_.sp_gathered;
    ctx.sp_full = acts_.sp_full;
    ctx.sp_d_norm = acts_.sp_d_norm;
    ctx.sp_norm_grad = acts_.sp_norm_grad;
  }
  if (options_.tp.enabled()) {
    ctx.vocab_begin = int64_t{options_.tp.rank} * config_.vocab_size;
    ctx.vocab_parallel = const_cast<VocabParallelScratch*>(&vocab_parallel_);
  }
  return ctx;
}

LayerActivations& LlamaModel::saved_activations(int layer) {
  return acts_.layers[options_.activation_checkpointing ? 0 : layer];
}

void LlamaModel::layer_forward(const BlockContext& ctx, int layer, int set, bool training) {
  const int64_t n = ctx.local_rows, c = config_.dim;
  LayerActivations a = acts_.layers[set].sized(config_, ctx.dims, ctx.local_rows);
  const Tensor x = leading_rows(acts_.residual[layer], n, c);
  const Tensor out = leading_rows(acts_.residual[layer + 1], n, c);
  const LoraLayerStep* lora = lora_step(layer, ctx.dims, set, training);
  attention_block_forward(ctx, layer, compute_weights().layers[layer], x, a, lora);
  mlp_block_forward(ctx, compute_weights().layers[layer], a, out, lora);
}

const LoraLayerStep* LlamaModel::lora_step(int layer, StepDims dims, int set, bool training) {
  if (!lora_.enabled()) return nullptr;
  lora_step_ = lora_.step(layer, dims.rows(), set, training,
                          dropout_hash(static_cast<uint64_t>(dropout_step_),
                                       static_cast<uint64_t>(dropout_micro_batch_)));
  lora_step_.tp = options_.tp;
  if (options_.tp.splits_sequence())
    lora_step_.row_begin = options_.tp.rank * (dims.rows() / options_.tp.size);
  return &lora_step_;
}

void LlamaModel::embed_and_layers_forward(const BlockContext& ctx, bool save_for_backward) {
  const int64_t n = ctx.local_rows, c = config_.dim;
  begin_forward(kEmbeddingGroup);
  embedding_block_forward(ctx, compute_weights().embedding, tokens_view_,
                          leading_rows(acts_.residual[0], n, c));
  call_hook(&GroupHooks::after_forward, kEmbeddingGroup);
  for (int l = 0; l < config_.n_layers; ++l) {
    begin_forward(layer_group(l));
    layer_forward(ctx, l, save_for_backward ? saved_set(l) : 0, save_for_backward);
    call_hook(&GroupHooks::after_forward, layer_group(l));
  }
}

LossTargets LlamaModel::loss_targets() const {
  LossTargets loss;
  loss.targets = targets_view_;
  loss.loss_mask = mask_view_;
  return loss;
}

LossSum LlamaModel::forward_backward(const Batch& batch, float grad_scale) {
  const int64_t count = forward_backward(batch, grad_scale, acts_.loss_sum);
  return LossSum{read_loss_sum(acts_.loss_sum), count};
}

int64_t LlamaModel::forward_backward(const Batch& batch, float grad_scale,
                                     const Tensor& loss_sum) {
  const StepDims dims =
      prepare_inputs(batch.tokens, &batch.targets, batch.loss_mask, batch.doc_ids, 0);
  const BlockContext ctx = make_context(dims);
  const int64_t n = ctx.local_rows, c = config_.dim;
  const int head = head_group(config_);
  if (norm_grad_sink_.defined()) backend_->fill_zero(norm_grad_sink_);
  embed_and_layers_forward(ctx, true);

  begin_forward(head);
  head_block_forward_backward(ctx, compute_weights(), grad_views_,
                              leading_rows(acts_.residual[config_.n_layers], n, c), acts_,
                              loss_targets(), grad_scale);
  call_hook(&GroupHooks::after_backward, head);

  const BackwardScratch scratch = acts_.scratch.sized(config_, dims, ctx.local_rows);
  for (int l = config_.n_layers - 1; l >= 0; --l) {
    begin_backward(layer_group(l));
    // With checkpointing the shared set still holds the last layer from the forward pass.
    if (options_.activation_checkpointing && l != config_.n_layers - 1) {
      layer_forward(ctx, l, 0, true);
    }
    const LayerActivations a = saved_activations(l).sized(config_, dims, ctx.local_rows);
    const LoraLayerStep* lora = lora_step(l, dims, saved_set(l), true);
    mlp_block_backward(ctx, compute_weights().layers[l], grad_views_.layers[l], a, scratch, lora);
    attention_block_backward(ctx, l, compute_weights().layers[l], grad_views_.layers[l],
                             leading_rows(acts_.residual[l], n, c), a, scratch, lora);
    call_hook(&GroupHooks::after_backward, layer_group(l));
  }

  begin_backward(kEmbeddingGroup);
  if (!lora_.enabled())
    embedding_block_backward(ctx, tokens_view_, scratch.d_residual, grad_views_.embedding);
  call_hook(&GroupHooks::after_backward, kEmbeddingGroup);
  backend_->sum_to_double(acts_.losses.flat(0, dims.rows()), loss_sum);
  return count_loss_tokens(batch);
}

LossSum LlamaModel::forward_loss(const Batch& batch) {
  const StepDims dims =
      prepare_inputs(batch.tokens, &batch.targets, batch.loss_mask, batch.doc_ids, 0);
  const BlockContext ctx = make_context(dims);
  embed_and_layers_forward(ctx, false);
  const int head = head_group(config_);
  begin_forward(head);
  const Tensor last = leading_rows(acts_.residual[config_.n_layers], ctx.local_rows, config_.dim);
  head_block_forward_loss(ctx, compute_weights(), last, acts_, loss_targets());
  call_hook(&GroupHooks::after_forward, head);
  backend_->sum_to_double(acts_.losses.flat(0, dims.rows()), acts_.loss_sum);
  return LossSum{read_loss_sum(acts_.loss_sum), count_loss_tokens(batch)};
}

void LlamaModel::forward_logits(const Tensor& tokens, const Tensor& logits, const Tensor* doc_ids) {
  ANVIL_CHECK(!options_.tp.enabled() && !options_.cp.enabled(),
              "[model] forward_logits needs the whole model and whole sequences; it is not "
              "available under tensor or context parallelism");
  const StepDims dims = prepare_inputs(tokens, nullptr, nullptr, doc_ids, 0);
  check_shape(logits, Shape{dims.batch, dims.seq, config_.vocab_size}, "logits");
  check_dtype(logits, DType::f32, "logits");
  ANVIL_CHECK(logits.device == backend_->device(),
              "[model] logits must live on the model's device");
  const BlockContext ctx = make_context(dims);
  embed_and_layers_forward(ctx, false);
  const int head = head_group(config_);
  begin_forward(head);
  head_block_forward_logits(
      ctx, compute_weights(),
      leading_rows(acts_.residual[config_.n_layers], dims.rows(), config_.dim),
      acts_, logits.view(Shape{dims.rows(), config_.vocab_size}));
  call_hook(&GroupHooks::after_forward, head);
}

double LlamaModel::read_loss_sum(const Tensor& loss_sum) {
  double sum = 0.0;
  backend_->copy_to_host(&sum, loss_sum);
  return sum;
}

int64_t LlamaModel::count_loss_tokens(const Batch& batch) {
  const int64_t n = batch.targets.numel();
  ANVIL_CHECK(n <= static_cast<int64_t>(host_targets_.size()),
              "[model] batch of {} positions exceeds max_batch * max_seq", n);
  check_dtype(batch.targets, DType::i32, "targets");
  const int32_t* targets = batch.targets.i32();
  if (!batch.targets.device.is_cpu()) {
    backend_->copy_to_host(host_targets_.data(), batch.targets);
    targets = host_targets_.data();
  }
  const float* mask = nullptr;
  if (batch.loss_mask) {
    check_dtype(*batch.loss_mask, DType::f32, "loss_mask");
    mask = batch.loss_mask->f32();
    if (!batch.loss_mask->device.is_cpu()) {
      backend_->copy_to_host(host_mask_.data(), *batch.loss_mask);
      mask = host_mask_.data();
    }
  }
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (targets[i] != kIgnoreIndex && (mask == nullptr || mask[i] != 0.0f)) ++count;
  }
  return count;
}

void LlamaModel::call_hook(void (GroupHooks::*hook)(int), int group) {
  if (hooks_) (hooks_->*hook)(group);
}

void LlamaModel::begin_forward(int group) {
  call_hook(&GroupHooks::before_forward, group);
  if (compute_.owns_copies()) compute_.refresh(group, params_.group(group), weights_, true);
  if (bf16_base_.enabled()) bf16_base_.refresh(group, weights_);
  if (lora_.enabled()) lora_.refresh(group);
}

void LlamaModel::begin_backward(int group) {
  call_hook(&GroupHooks::before_backward, group);
  if (compute_.owns_copies()) compute_.refresh(group, params_.group(group), weights_, false);
  if (bf16_base_.enabled()) bf16_base_.refresh(group, weights_);
  // A parallel layer may have re-gathered the adapters into other storage.
  if (lora_.enabled()) lora_.refresh(group);
}

}  // namespace anvil
