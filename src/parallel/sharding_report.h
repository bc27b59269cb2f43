// The sharding and memory report printed at the start of every training and fine-tuning run
// (and by --dry-run): the trainable and total parameter counts; for each parameter, its global shape, the part of it this rank holds,
// its dtype, whether it trains, and which of its states are split over which mesh axis; for
// each rank, the bytes its backend holds by memory category now and at most so far, as the
// backend counted them (DataParallelEngine::memory). The same content goes to the run
// directory as JSON: memory_per_rank entries hold "rank", one key per category name
// (core/memory_category.h), "total", "total_peak" and "peak" (the category peaks).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "parallel/engine.h"

namespace anvil {

struct ShardingReport {
  nlohmann::json json;  // {"mesh", "parameters", "tensors": [...], "memory_per_rank": [...]}
  std::string text;     // the same as tables (one row per tensor kind, one per rank) whose
                        // columns are as wide as their widest cell
};

// Builds the report; collective over the world (every rank's memory is gathered). The
// tensor rows describe world rank 0's view (each rank of a mesh holds equal-sized parts).
ShardingReport sharding_report(DataParallelEngine& engine);

}  // namespace anvil
