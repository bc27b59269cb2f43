// The tensor-parallel element maps and shard configs: runs cover a tensor exactly once across
// the tp ranks, overlaps translate between two tp sizes, and sizes tp cannot divide are
// refused with one clear error that names them.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "model/llama_parameters.h"
#include "model/lora.h"
#include "model/tensor_parallel.h"

namespace anvil {
namespace {

LlamaConfig small_config() {
  LlamaConfig c;
  c.dim = 32;
  c.n_layers = 2;
  c.n_heads = 8;
  c.n_kv_heads = 4;
  c.ffn_dim = 88;
  c.vocab_size = 64;
  c.max_seq_len = 16;
  return c;
}

// Returns, for every element of a full tensor, which (rank, local index) holds it.
std::vector<std::pair<int, int64_t>> owners(const Shape& full, int split_dim, int size) {
  std::vector<std::pair<int, int64_t>> owner(static_cast<size_t>(full.numel()), {-1, -1});
  for (int rank = 0; rank < size; ++rank) {
    int64_t covered = 0;
    for (const TpRun& run : tp_runs(full, split_dim, size, rank)) {
      EXPECT_EQ(run.local, covered) << "runs are contiguous in the shard";
      covered += run.length;
      for (int64_t i = 0; i < run.length; ++i) {
        EXPECT_EQ(owner[static_cast<size_t>(run.global + i)].first, -1) << "covered twice";
        owner[static_cast<size_t>(run.global + i)] = {rank, run.local + i};
      }
    }
    EXPECT_EQ(covered, tp_shard_shape(full, split_dim, size).numel());
  }
  return owner;
}

TEST(TensorParallelMaps, RowAndColumnSplitsCoverEveryElementOnce) {
  const Shape full{6, 8};
  for (int size : {1, 2}) {
    for (int dim : {0, 1}) {
      const auto owner = owners(full, dim, size);
      for (int64_t r = 0; r < 6; ++r) {
        for (int64_t c = 0; c < 8; ++c) {
          const auto [rank, local] = owner[static_cast<size_t>(r * 8 + c)];
          const int64_t block = (dim == 0 ? 6 : 8) / size;
          EXPECT_EQ(rank, static_cast<int>((dim == 0 ? r : c) / block));
          // The shard is the full tensor's block, row-major.
          const int64_t width = dim == 0 ? 8 : 8 / size;
          EXPECT_EQ(local, dim == 0 ? (r - rank * block) * width + c
                                    : r * width + (c - rank * block));
        }
      }
    }
  }
  // A replicated tensor: every rank holds all of it.
  EXPECT_EQ(tp_runs(full, -1, 4, 3).size(), 1u);
  EXPECT_EQ(tp_runs(full, -1, 4, 3)[0].length, 48);
}

TEST(TensorParallelMaps, OverlapsTranslateBetweenTpSizes) {
  const Shape full{4, 8};
  for (int dim : {0, 1}) {
    const auto two = owners(full, dim, 2);
    const auto four = owners(full, dim, 4);
    for (int a = 0; a < 2; ++a) {
      for (int b = 0; b < 4; ++b) {
        for (const TpOverlap& o :
             tp_overlaps(tp_runs(full, dim, 2, a), tp_runs(full, dim, 4, b))) {
          for (int64_t i = 0; i < o.length; ++i) {
            // Find the full element that shard a's local o.a + i is, and check shard b has it.
            const auto at = std::find(two.begin(), two.end(), std::make_pair(a, o.a + i));
            ASSERT_NE(at, two.end());
            EXPECT_EQ(four[static_cast<size_t>(at - two.begin())], std::make_pair(b, o.b + i));
          }
        }
      }
    }
  }
}

TEST(TensorParallelShards, ShardConfigDividesHeadsFfnAndVocabulary) {
  const LlamaConfig shard = tp_shard_config(small_config(), 4);
  EXPECT_EQ(shard.n_heads, 2);
  EXPECT_EQ(shard.n_kv_heads, 1);
  EXPECT_EQ(shard.ffn_dim, 22);
  EXPECT_EQ(shard.vocab_size, 16);
  EXPECT_EQ(shard.resolved_head_dim(), 4);  // unchanged: heads are split, not narrowed
  EXPECT_EQ(shard.dim, 32);
}

TEST(TensorParallelShards, LayoutsMarkTheSplitOfEveryTensor) {
  auto split_of = [](const ParameterLayout& layout, const std::string& name) {
    return layout.params()[static_cast<size_t>(layout.index_of(name))].split_dim;
  };
  const auto base = make_llama_layout(small_config(), true);
  EXPECT_EQ(split_of(*base, "model.embed_tokens.weight"), 0);
  EXPECT_EQ(split_of(*base, "model.layers.0.self_attn.q_proj.weight"), 0);
  EXPECT_EQ(split_of(*base, "model.layers.0.self_attn.o_proj.weight"), 1);
  EXPECT_EQ(split_of(*base, "model.layers.0.mlp.down_proj.weight"), 1);
  EXPECT_EQ(split_of(*base, "model.layers.0.input_layernorm.weight"), -1);
  LoraOptions lora;
  lora.r = 2;
  lora.targets = {"q_proj", "o_proj"};
  const auto adapters = make_lora_layout(small_config(), lora);
  EXPECT_EQ(split_of(*adapters, "model.layers.0.self_attn.q_proj.lora_A.weight"), -1);
  EXPECT_EQ(split_of(*adapters, "model.layers.0.self_attn.q_proj.lora_B.weight"), 0);
  EXPECT_EQ(split_of(*adapters, "model.layers.0.self_attn.o_proj.lora_A.weight"), 1);
  EXPECT_EQ(split_of(*adapters, "model.layers.0.self_attn.o_proj.lora_B.weight"), -1);
}

void expect_refused(const LlamaConfig& config, int tp, const std::string& needle) {
  try {
    tp_shard_config(config, tp);
    ADD_FAILURE() << "tp " << tp << " was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(TensorParallelShards, IndivisibleSizesAreOneClearError) {
  expect_refused(small_config(), 3, "tp 3 does not divide the attention heads (n_heads) (8)");
  LlamaConfig kv = small_config();
  kv.n_kv_heads = 2;
  expect_refused(kv, 4, "tp 4 does not divide the key/value heads (n_kv_heads) (2)");
  LlamaConfig ffn = small_config();
  ffn.ffn_dim = 90;
  expect_refused(ffn, 4, "tp 4 does not divide the MLP width (ffn_dim) (90)");
  LlamaConfig vocab = small_config();
  vocab.vocab_size = 66;
  expect_refused(vocab, 4, "tp 4 does not divide the vocabulary (vocab_size) (66)");
}

}  // namespace
}  // namespace anvil
