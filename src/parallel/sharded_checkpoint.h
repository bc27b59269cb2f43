// The engine's part of a checkpoint folder, written by many ranks and readable by any mesh:
//   model.safetensors               full f32 weights under Hugging Face names (world rank 0,
//                                   gathered from the shards under stage 3)
//   optimizer.safetensors           (one fsdp shard) or
//   optimizer-<f>-of-<N>.safetensors  one file per fsdp shard, written by the shard's dp-0
//                                   rank: AdamW "adamw.m.<g>" / "adamw.v.<g>" for the part of
//                                   group g the shard holds; metadata "shard_offsets" (JSON
//                                   {"<g>": first element}) and "step"
// dp replicas hold identical state and write nothing twice. Loading works for any world size
// and stage: each rank maps every optimizer file once and copies the slices that overlap what it
// holds (its shard, or everything), and checks that every element was found exactly once. A
// file without "shard_offsets" is read as offset 0 (the one-process trainer's format).
#pragma once

#include <cstdint>
#include <filesystem>

#include "io/safetensors_collection.h"
#include "parallel/engine.h"

namespace anvil {

// Writes this rank's files into `dir` (a folder every rank can reach; all files fsynced).
// Collective over the mesh.
void write_engine_checkpoint(DataParallelEngine& engine, const std::filesystem::path& dir);

// Loads weights, AdamW moments and the optimizer step from a folder written by any mesh;
// throws "[checkpoint] <file>: ..." on a missing or inconsistent piece. No communication.
void read_engine_checkpoint(DataParallelEngine& engine, const std::filesystem::path& dir);

// Writes only this rank's optimizer file (the second half of write_engine_checkpoint; a LoRA
// checkpoint stores its weights as a PEFT adapter instead). Collective over the mesh.
void write_engine_optimizer(DataParallelEngine& engine, const std::filesystem::path& dir);

// Loads only the AdamW moments and the optimizer step from a folder written by any mesh.
void read_engine_optimizer(DataParallelEngine& engine, const std::filesystem::path& dir);

// Loads only weights (of model.trainable()) from tensors under Hugging Face names (f32, bf16 or f16: a file, or a
// Hugging Face folder's shards), each rank the part it holds (model.init_from).
void read_engine_weights(DataParallelEngine& engine, const SafetensorsCollection& tensors);

// Writes the LoRA adapters the engine trains as a PEFT adapter folder (adapter_config.json +
// adapter_model.safetensors) into `dir`: every rank takes part in the gathers of sharded
// groups, world rank 0 writes. Collective over the mesh.
void write_engine_adapter(DataParallelEngine& engine, const std::filesystem::path& dir,
                          const std::string& base_model_name_or_path);
// Loads a PEFT adapter folder into the adapters each rank holds. No communication.
void read_engine_adapter(DataParallelEngine& engine, const std::filesystem::path& dir);

// Returns the optimizer step recorded in a checkpoint folder's optimizer file(s).
int64_t checkpoint_optimizer_step(const std::filesystem::path& dir);

}  // namespace anvil
