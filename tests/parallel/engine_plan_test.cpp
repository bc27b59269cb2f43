// Planning without allocating: planned_rank_memory equals the memory report of
// an engine actually built for the same settings, for every ZeRO stage, with and without
// LoRA, mixed precision, activation checkpointing, several micro-batches, attention bias and
// untied embeddings (one process; the mpirun tier checks sharded ranks and the traffic).
#include <gtest/gtest.h>

#include "model/llama.h"
#include "parallel/engine.h"
#include "parallel/engine_plan.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Harness;
using ptest::RunSpec;

TEST(EnginePlan, PlannedMemoryEqualsTheBuiltEnginesReport) {
  auto comm = make_single_process_communicator();
  for (int stage = 0; stage <= 3; ++stage) {
    for (int variant = 0; variant < 7; ++variant) {
      RunSpec spec;
      spec.zero_stage = stage;
      if (variant == 1) spec.grad_accum = 3;
      if (variant == 2) spec.activation_checkpointing = true;
      if (variant == 3) {
        spec.lora_r = 4;
        spec.dtype = DType::bf16;  // a bf16 base
      }
      if (variant == 4) {
        spec.lora_r = 2;
        spec.tied = false;
        spec.grad_accum = 2;
      }
      if (variant == 5) spec.dtype = DType::bf16;  // stage 3: gathered bf16, no copies
      if (variant == 6) {
        spec.dtype = DType::bf16;
        spec.tied = false;
        spec.prefetch = 3;
        spec.grad_accum = 2;
      }
      SCOPED_TRACE(::testing::Message() << "stage " << stage << " variant " << variant);
      Harness harness(*comm, spec);
      ptest::expect_planned_memory(harness, spec);
    }
  }
}

TEST(EnginePlan, PlannedModelMemoryEqualsTheBuiltModel) {
  // Shapes with padding everywhere (odd vocabulary, attention bias, bf16 copies).
  LlamaConfig config = ptest::tiny_config(false);
  config.vocab_size = 61;
  config.attention_bias = true;
  const auto backend = make_backend("cpu");
  for (const DType dtype : {DType::f32, DType::bf16}) {
    ModelOptions options;
    options.max_batch = 3;
    options.compute_dtype = dtype;
    options.logits_chunk_rows = 5;
    const LlamaModel model(config, *backend, options);
    const ModelMemory built = model.memory();
    const ModelMemory planned = LlamaModel::planned_memory(config, options);
    EXPECT_EQ(planned.activations, built.activations);
    EXPECT_EQ(planned.compute_copies, built.compute_copies);
    EXPECT_EQ(planned.trainable, built.trainable);
    EXPECT_EQ(planned.gradients, built.gradients);
    EXPECT_EQ(planned.frozen, built.frozen);
    EXPECT_EQ(planned.trainable_count, built.trainable_count);
  }
}

TEST(EnginePlan, PlanningRefusesWhatTheModelRefuses) {
  ModelOptions options;
  options.max_batch = 0;
  EXPECT_THROW(LlamaModel::planned_memory(ptest::tiny_config(true), options), Error);
  options.max_batch = 1;
  options.lora_base_dtype = DType::bf16;  // without LoRA
  EXPECT_THROW(LlamaModel::planned_memory(ptest::tiny_config(true), options), Error);
}

}  // namespace
}  // namespace anvil
