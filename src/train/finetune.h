// `anvil finetune`: supervised fine-tuning of a Hugging Face model, with LoRA adapters by
// default or all weights with --full. This file turns a request (base model folder, SFT data,
// flags) into a validated TrainConfig the ordinary trainer runs: the [model] section comes
// from the base's config.json, model.init_from names the base, JSONL data is rendered with a
// chat template into loss-masked shards under <run-dir>/data, and the step count follows from
// the epochs asked for. Precedence: SFT defaults < --config file < --section.key flags. A run
// directory that already holds a config.toml is resumed with it (flags still apply on top).
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "comm/communicator.h"
#include "data/line_reader.h"
#include "train/config.h"

namespace anvil {

struct FinetuneRequest {
  std::filesystem::path
      model_dir;            // Hugging Face model folder (config.json, safetensors, tokenizer)
  std::string data;         // a .jsonl file (or folder / glob of them), or a shard folder
  bool full = false;        // train every weight instead of LoRA adapters
  // A PEFT adapter folder to continue training (its r, alpha, dropout, targets and values).
  std::filesystem::path adapter;
  std::string config_path;  // optional TOML file
  std::filesystem::path run_dir;
  std::string chat_template;  // empty: the tokenizer's default
  double epochs = 3.0;        // used unless training.steps is set
  bool packing = true;        // JSONL: pack examples (false: pad each to whole windows)
  uint64_t max_record_bytes = kDefaultMaxRecordBytes;  // JSONL: bound on one record
  std::string resume = "auto";
  std::vector<ConfigOverride> overrides;
};

// Returns the SFT defaults: LoRA r 8, alpha 16, dropout 0.05 on q/k/v/o_proj at lr 2e-4, or
// (full) lr 2e-5 and no adapters; cosine to 0 with 3% warmup, no weight decay, document masks.
TrainConfig sft_defaults(bool full);

// Returns the run's configuration, preparing JSONL data into <run-dir>/data first when needed
// (world rank 0 prepares, every rank returns the same config). Throws one clear line on a bad
// request: a missing model folder, --full with --lora.r, unreadable or invalid data.
TrainConfig resolve_finetune_config(const FinetuneRequest& request, Communicator& world);

// Returns the optimizer steps for `epochs` passes over `windows` training windows with
// `rows_per_step` sequences per optimizer step (at least 1).
int64_t steps_for_epochs(double epochs, int64_t windows, int64_t rows_per_step);

}  // namespace anvil
