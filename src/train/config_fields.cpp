// The table of configuration keys. This is the whole configuration surface of `anvil train`:
// adding a key means adding a struct field (config.h), one row here, one row in
// docs/training.md and one name in tests/train/config_test.cpp's pinned list.
#include <fmt/format.h>

#include "train/config.h"

namespace anvil {

// One row: the field's section and key names come from the member path itself, so a row can
// never name a field other than the one it points at.
#define ANVIL_CONFIG_FIELD(section, key, help)                                   \
  ConfigField {                                                                  \
    #section, #key, help, [](TrainConfig& c) -> ConfigFieldRef {                 \
      return &c.section.key;                                                     \
    }                                                                            \
  }
// An integer row whose values may use all 64 bits (ConfigField::wide).
#define ANVIL_WIDE_CONFIG_FIELD(section, key, help)                              \
  ConfigField {                                                                  \
    #section, #key, help, [](TrainConfig& c) -> ConfigFieldRef {                 \
      return &c.section.key;                                                     \
    }, true                                                                      \
  }

const std::vector<ConfigField>& config_fields() {
  static const std::vector<ConfigField> fields = {
      ANVIL_CONFIG_FIELD(model, dim, "hidden size"),
      ANVIL_CONFIG_FIELD(model, n_layers, "transformer blocks"),
      ANVIL_CONFIG_FIELD(model, n_heads, "attention (query) heads"),
      ANVIL_CONFIG_FIELD(model, n_kv_heads, "key/value heads (GQA); divides n_heads"),
      ANVIL_CONFIG_FIELD(model, head_dim, "per-head width (0: dim / n_heads)"),
      ANVIL_CONFIG_FIELD(model, ffn_dim, "SwiGLU intermediate size"),
      ANVIL_CONFIG_FIELD(model, vocab_size, "vocabulary size (>= the tokenizer's)"),
      ANVIL_CONFIG_FIELD(model, max_seq_len, "longest sequence the model supports"),
      ANVIL_CONFIG_FIELD(model, rope_theta, "RoPE base frequency"),
      ANVIL_CONFIG_FIELD(model, rope_scaling_factor, "llama3 RoPE scaling factor (0: off)"),
      ANVIL_CONFIG_FIELD(model, rope_low_freq_factor, "llama3 RoPE scaling low_freq_factor"),
      ANVIL_CONFIG_FIELD(model, rope_high_freq_factor, "llama3 RoPE scaling high_freq_factor"),
      ANVIL_CONFIG_FIELD(model, rope_original_max_position,
                         "llama3 RoPE scaling original_max_position_embeddings"),
      ANVIL_CONFIG_FIELD(model, norm_eps, "RMSNorm epsilon"),
      ANVIL_CONFIG_FIELD(model, tie_embeddings, "share the embedding table with lm_head"),
      ANVIL_CONFIG_FIELD(model, attention_bias, "q/k/v projection biases (Qwen2)"),
      ANVIL_CONFIG_FIELD(model, init_from, "HF model dir or checkpoint to start from"),
      ANVIL_CONFIG_FIELD(data, path, "token shard directory (from `anvil prepare`)"),
      ANVIL_CONFIG_FIELD(data, sources,
                         "weighted mixture: [{ path = \"dir\", weight = 0.7 }, ...] "
                         "(instead of path)"),
      ANVIL_CONFIG_FIELD(data, tokenizer, "tokenizer.json, checked against the data's"),
      ANVIL_CONFIG_FIELD(data, synthetic, "train on random tokens, no files"),
      ANVIL_CONFIG_FIELD(data, val_split, "split used for evaluation"),
      ANVIL_CONFIG_FIELD(training, steps, "optimizer steps"),
      ANVIL_CONFIG_FIELD(training, batch_size, "sequences per micro-batch"),
      ANVIL_CONFIG_FIELD(training, seq_len, "tokens per sequence"),
      ANVIL_CONFIG_FIELD(training, grad_accum, "micro-batches per optimizer step"),
      ANVIL_CONFIG_FIELD(training, dtype, "compute dtype: f32, bf16, or fp16 (cpu, cpu-ref, sim)"),
      ANVIL_CONFIG_FIELD(training, activation_checkpointing, "recompute blocks in backward"),
      ANVIL_CONFIG_FIELD(training, doc_mask, "attend only within a document"),
      ANVIL_WIDE_CONFIG_FIELD(training, seed, "seed for weights and data order"),
      ANVIL_CONFIG_FIELD(training, eval_every, "evaluate every N steps (0: only at the end)"),
      ANVIL_CONFIG_FIELD(training, eval_steps, "validation batches per evaluation"),
      ANVIL_CONFIG_FIELD(training, skip_nonfinite,
                         "skip a step with a non-finite loss/grad norm instead of stopping"),
      ANVIL_CONFIG_FIELD(training, max_skipped_steps,
                         "with skip_nonfinite: stop after this many consecutive skipped steps"),
      ANVIL_CONFIG_FIELD(training, loss_scale,
                         "loss scaling: off, or dynamic (halve and skip on overflow)"),
      ANVIL_CONFIG_FIELD(training, loss_scale_init, "dynamic loss scaling: the first scale (2^k)"),
      ANVIL_CONFIG_FIELD(training, loss_scale_growth_interval,
                         "dynamic loss scaling: clean steps before the scale doubles"),
      ANVIL_CONFIG_FIELD(attention, pattern, "sparse pattern: dense, strided or lines"),
      ANVIL_CONFIG_FIELD(attention, segment, "positions per segment (strided, lines; x64)"),
      ANVIL_CONFIG_FIELD(attention, stride, "strided: every stride-th earlier segment"),
      ANVIL_CONFIG_FIELD(attention, window, "sliding window in positions (0: off)"),
      ANVIL_CONFIG_FIELD(attention, sinks, "first positions every query sees (global sinks)"),
      ANVIL_CONFIG_FIELD(attention, dense_every, "every N-th layer attends densely (0: none)"),
      ANVIL_CONFIG_FIELD(optimizer, lr, "peak learning rate"),
      ANVIL_CONFIG_FIELD(optimizer, min_lr, "final learning rate of decaying schedules"),
      ANVIL_CONFIG_FIELD(optimizer, schedule, "cosine, linear, constant or wsd"),
      ANVIL_CONFIG_FIELD(optimizer, warmup_steps, "linear warmup steps"),
      ANVIL_CONFIG_FIELD(optimizer, weight_decay, "decoupled weight decay (matrices only)"),
      ANVIL_CONFIG_FIELD(optimizer, beta1, "AdamW beta1"),
      ANVIL_CONFIG_FIELD(optimizer, beta2, "AdamW beta2"),
      ANVIL_CONFIG_FIELD(optimizer, eps, "AdamW epsilon"),
      ANVIL_CONFIG_FIELD(optimizer, grad_clip, "global gradient-norm clip (<= 0: off)"),
      ANVIL_CONFIG_FIELD(optimizer, decay_embeddings, "apply weight decay to embeddings"),
      ANVIL_CONFIG_FIELD(optimizer, wsd_decay_fraction, "wsd: fraction of steps that decay"),
      ANVIL_CONFIG_FIELD(parallel, dp, "data-parallel replicas (0: automatic)"),
      ANVIL_CONFIG_FIELD(parallel, fsdp, "ranks sharing one copy of sharded state (0: automatic)"),
      ANVIL_CONFIG_FIELD(parallel, tp, "tensor-parallel ranks (heads, FFN, vocabulary split)"),
      ANVIL_CONFIG_FIELD(parallel, cp,
                         "context-parallel ranks (each sequence split, ring attention; "
                         "seq_len divisible by 2 x cp)"),
      ANVIL_CONFIG_FIELD(parallel, sequence_parallel,
                         "tp > 1: split the residual stream over the tp ranks by sequence"),
      ANVIL_CONFIG_FIELD(parallel, zero_stage, "ZeRO stage 0-3 on the fsdp axis"),
      ANVIL_CONFIG_FIELD(parallel, offload,
                         "keep AdamW state and f32 masters on the host (ZeRO-3: gradient shards "
                         "too; the device keeps its shard in the compute dtype)"),
      ANVIL_CONFIG_FIELD(parallel, offload_params,
                         "with offload and ZeRO-3: keep the weight shard in host memory too, "
                         "uploaded into its slot before each gather (the device holds no "
                         "persistent weights)"),
      ANVIL_CONFIG_FIELD(parallel, prefetch,
                         "ZeRO-3: groups gathered ahead of the one in use (>= 1; each "
                         "holds one layer in the compute dtype)"),
      ANVIL_CONFIG_FIELD(parallel, reshard_after_forward,
                         "ZeRO-3: free each layer's gathered weights after its forward and "
                         "gather again for backward (true), or keep every layer gathered to the "
                         "end of the step (false: less traffic, one slot per layer)"),
      ANVIL_CONFIG_FIELD(parallel, overlap,
                         "overlap collectives with compute (false: each completes where it starts)"),
      ANVIL_CONFIG_FIELD(parallel, collective_timeout_s,
                         "end a rank blocked this long in one collective (0: never)"),
      ANVIL_CONFIG_FIELD(parallel, reduce,
                         "gradient reductions: exact (bitwise one process) or fast (the "
                         "library's all-reduce / reduce-scatter, repeatable on one mesh)"),
      ANVIL_CONFIG_FIELD(parallel, reduce_dtype,
                         "what fast reductions move: f32, or bf16 (needs reduce = fast)"),
      ANVIL_CONFIG_FIELD(checkpoint, every, "checkpoint every N steps (0: only at the end)"),
      ANVIL_CONFIG_FIELD(checkpoint, keep, "committed checkpoints to keep"),
      ANVIL_CONFIG_FIELD(checkpoint, on_error,
                         "a checkpoint that cannot be written: stop, or continue training"),
      ANVIL_CONFIG_FIELD(lora, r, "adapter rank (0: no LoRA)"),
      ANVIL_CONFIG_FIELD(lora, alpha, "adapter scale numerator (scale = alpha / r)"),
      ANVIL_CONFIG_FIELD(lora, dropout, "adapter input dropout"),
      ANVIL_CONFIG_FIELD(lora, targets, "modules that get adapters"),
      ANVIL_CONFIG_FIELD(lora, init_from, "PEFT adapter folder to continue from (empty: fresh)"),
      ANVIL_CONFIG_FIELD(lora, base_dtype,
                         "dtype of the frozen base: auto (training.dtype), f32 or bf16"),
      ANVIL_CONFIG_FIELD(eval, batch_size, "sequences per eval batch (0: training.batch_size)"),
      ANVIL_CONFIG_FIELD(eval, tasks,
                         "benchmarks scored at every evaluation: mmlu, hellaswag, arc_easy, "
                         "arc_challenge, piqa, winogrande, boolq (see `anvil eval --help`)"),
      ANVIL_CONFIG_FIELD(eval, task_data, "one data path per eval.tasks entry"),
      ANVIL_CONFIG_FIELD(eval, task_shots, "few-shot examples for mmlu (-1: 5)"),
      ANVIL_CONFIG_FIELD(eval, task_limit,
                         "questions per subtask at each evaluation (0: all)"),
      ANVIL_CONFIG_FIELD(logging, every, "plain progress line every N steps"),
      ANVIL_CONFIG_FIELD(logging, json, "print a JSON summary as the last stdout line"),
      ANVIL_CONFIG_FIELD(logging, tensorboard, "also write TensorBoard event files in the run"),
      ANVIL_CONFIG_FIELD(logging, peak_tflops,
                         "peak TFLOP/s of one device: metrics get mfu (0: no mfu)"),
      ANVIL_CONFIG_FIELD(profile, steps,
                         "\"A:B\": trace steps A..B on every rank into <run>/trace.json "
                         "(empty: off)"),
      ANVIL_CONFIG_FIELD(preflight, mode,
                         "memory check before a run allocates: check (refuse a run that will "
                         "not fit), warn (say so, go on) or off; --preflight=MODE sets it"),
      ANVIL_CONFIG_FIELD(preflight, margin,
                         "share of the free memory the planned peak must leave unused"),
  };
  return fields;
}

#undef ANVIL_CONFIG_FIELD
#undef ANVIL_WIDE_CONFIG_FIELD

const std::vector<std::string_view>& config_sections() {
  static const std::vector<std::string_view> sections = {
      "model",    "data", "training", "attention", "optimizer", "parallel", "checkpoint",
      "lora",     "eval", "logging",  "profile",   "preflight"};
  return sections;
}

std::string ConfigField::full_name() const { return fmt::format("{}.{}", section, key); }

}  // namespace anvil
