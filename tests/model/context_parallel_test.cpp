// Context parallelism in one process: the chunk layout (which global positions a cp rank's
// rows hold, how a batch is cut, the seq_len check), the block visibility rule, and ring
// attention itself under causal, document, window, strided and lines masks with sinks. For the
// latter, cp threads play the cp ranks over an in-memory ring (each send is copied into the
// next rank's mailbox, so no exchange blocks another), and every
// rank's out, dq, dk and dv must equal the rows of one whole-sequence attention (the CPU
// reference backend) to 2e-6: only the order of the softmax sums differs.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "backend/backend.h"
#include "model/context_parallel.h"

namespace anvil {
namespace {

TEST(ContextParallelLayout, RankIHoldsChunksIAndTwoCpMinusOneMinusI) {
  // T = 16, cp = 4: chunks of 2; rank 1 holds chunks 1 and 6.
  const ContextParallel cp{4, 1, nullptr};
  std::vector<int64_t> positions;
  for (int64_t t = 0; t < 4; ++t) positions.push_back(cp_global_position(cp, t, 4));
  EXPECT_EQ(positions, (std::vector<int64_t>{2, 3, 12, 13}));
  // Every position of the sequence belongs to exactly one rank.
  std::vector<int> owners(16, 0);
  for (int rank = 0; rank < 4; ++rank) {
    for (int64_t t = 0; t < 4; ++t) ++owners[cp_global_position({4, rank, nullptr}, t, 4)];
  }
  EXPECT_EQ(owners, std::vector<int>(16, 1));
}

TEST(ContextParallelLayout, LocalBatchTakesTheRowsOfEachSample) {
  const int batch = 2, seq = 8;
  std::vector<int32_t> tokens(batch * seq), targets(batch * seq), doc_ids(batch * seq);
  std::vector<float> mask(batch * seq);
  for (int i = 0; i < batch * seq; ++i) {
    tokens[i] = i;
    targets[i] = 100 + i;
    mask[i] = static_cast<float>(i % 3);
  }
  const Shape shape{batch, seq};
  const Tensor mask_view(mask.data(), DType::f32, shape);
  const Tensor doc_view(doc_ids.data(), DType::i32, shape);
  const Batch full{Tensor(tokens.data(), DType::i32, shape),
                   Tensor(targets.data(), DType::i32, shape), &mask_view, &doc_view};
  CpLocalBatch storage;
  const Batch local = cp_local_batch({2, 1, nullptr}, full, storage);  // chunks 1 and 2 of 4
  EXPECT_EQ(local.tokens.shape, (Shape{2, 4}));
  EXPECT_EQ(storage.tokens, (std::vector<int32_t>{2, 3, 4, 5, 10, 11, 12, 13}));
  EXPECT_EQ(storage.targets[0], 102);
  EXPECT_EQ(storage.loss_mask[1], mask[3]);
  EXPECT_EQ(local.doc_ids, &doc_view) << "document ids stay whole";
}

TEST(ContextParallelLayout, SeqLenMustSplitIntoTwoCpChunks) {
  EXPECT_NO_THROW(check_cp_seq_len(16, 4));
  try {
    check_cp_seq_len(12, 4);
    FAIL() << "12 positions do not split into 8 chunks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[parallel] seq_len 12 is not divisible by 2 x cp = 8"),
              std::string::npos)
        << e.what();
  }
}

TEST(ContextParallelLayout, BlocksHiddenByCausalOrWindowAreSkipped) {
  AttentionParams causal;
  EXPECT_TRUE(cp_block_may_be_visible(causal, 4, 4, 4));   // the diagonal
  EXPECT_TRUE(cp_block_may_be_visible(causal, 8, 0, 4));   // the past
  EXPECT_FALSE(cp_block_may_be_visible(causal, 0, 4, 4));  // the future
  AttentionParams window = causal;
  window.window = 3;  // query t sees (t - 3, t]
  EXPECT_TRUE(cp_block_may_be_visible(window, 4, 0, 4));   // query 4 sees key 2 and 3
  EXPECT_FALSE(cp_block_may_be_visible(window, 8, 0, 4));  // query 8 sees from key 6 on
  window.sinks = 1;                                        // key 0 is seen by every query
  EXPECT_TRUE(cp_block_may_be_visible(window, 8, 0, 4));
  AttentionParams both_ways = window;
  both_ways.causal = false;
  both_ways.sinks = 0;
  EXPECT_TRUE(cp_block_may_be_visible(both_ways, 0, 4, 4));   // key 5 is within 3 of query 3
  EXPECT_FALSE(cp_block_may_be_visible(both_ways, 0, 8, 4));  // key 8 is 5 after query 3
}

// An in-memory ring: rank r's sends are copied into rank r + 1's mailbox at once.
class ThreadRing {
 public:
  explicit ThreadRing(int size) : boxes_(static_cast<size_t>(size)) {}

  class Ops final : public ContextParallelOps {
   public:
    Ops(ThreadRing& ring, int rank) : ring_(&ring), rank_(rank) {}
    std::unique_ptr<RingExchange> ring_shift(std::span<const Tensor> send,
                                             std::span<const Tensor> recv) override {
      const int size = static_cast<int>(ring_->boxes_.size());
      for (const Tensor& t : send) ring_->post((rank_ + 1) % size, t);
      return std::make_unique<Exchange>(*ring_, rank_,
                                        std::vector<Tensor>(recv.begin(), recv.end()));
    }

   private:
    ThreadRing* ring_;
    int rank_;
  };

 private:
  struct Box {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::vector<char>> messages;
  };
  class Exchange final : public RingExchange {
   public:
    Exchange(ThreadRing& ring, int rank, std::vector<Tensor> recv)
        : ring_(&ring), rank_(rank), recv_(std::move(recv)) {}
    void wait() override {
      for (const Tensor& t : recv_) ring_->take(rank_, t);
      recv_.clear();
    }

   private:
    ThreadRing* ring_;
    int rank_;
    std::vector<Tensor> recv_;
  };

  void post(int to, const Tensor& t) {
    Box& box = boxes_[static_cast<size_t>(to)];
    const char* bytes = static_cast<const char*>(t.data);
    std::lock_guard lock(box.mutex);
    box.messages.emplace_back(bytes, bytes + t.nbytes());
    box.ready.notify_all();
  }
  void take(int rank, const Tensor& t) {
    Box& box = boxes_[static_cast<size_t>(rank)];
    std::unique_lock lock(box.mutex);
    box.ready.wait(lock, [&] { return !box.messages.empty(); });
    ASSERT_EQ(box.messages.front().size(), t.nbytes());
    std::memcpy(t.data, box.messages.front().data(), t.nbytes());
    box.messages.pop_front();
  }

  std::vector<Box> boxes_;
};

std::vector<float> random_values(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(count);
  for (float& x : v) x = dist(rng);
  return v;
}

// Rows of rank `rank` of a (B, T, H, D) host array, in the cp layout.
std::vector<float> local_rows(const std::vector<float>& full, int64_t batch, int64_t seq,
                              int64_t row, const ContextParallel& cp) {
  const int64_t local_seq = seq / cp.size;
  std::vector<float> out(static_cast<size_t>(batch * local_seq * row));
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t t = 0; t < local_seq; ++t) {
      const int64_t global = cp_global_position(cp, t, local_seq);
      std::memcpy(&out[(b * local_seq + t) * row], &full[(b * seq + global) * row],
                  static_cast<size_t>(row) * sizeof(float));
    }
  }
  return out;
}

struct RingCase {
  int cp;
  bool doc_mask;
  int window;
  SparsePattern pattern = SparsePattern::dense;
  int sinks = 0;
};

class RingAttentionEqualsWholeSequence : public ::testing::TestWithParam<RingCase> {};

TEST_P(RingAttentionEqualsWholeSequence, OutputsAndGradients) {
  const RingCase c = GetParam();
  const int64_t batch = 2, seq = 16, hq = 4, hkv = 2, d = 8;
  const int64_t q_row = hq * d, kv_row = hkv * d;
  const auto q = random_values(batch * seq * q_row, 1), k = random_values(batch * seq * kv_row, 2),
             v = random_values(batch * seq * kv_row, 3),
             dout = random_values(batch * seq * q_row, 4);
  std::vector<int32_t> doc_ids(batch * seq);
  for (int64_t i = 0; i < batch * seq; ++i)
    doc_ids[i] = static_cast<int32_t>((i % seq + i / seq * 3) / 5);  // documents of 5, shifted
  const Tensor doc_tensor(doc_ids.data(), DType::i32, Shape{batch, seq});
  AttentionParams params;
  params.window = c.window;
  params.pattern = c.pattern;
  params.segment = c.pattern == SparsePattern::dense ? 0 : 2;
  params.stride = c.pattern == SparsePattern::strided ? 3 : 0;
  params.sinks = c.sinks;
  params.doc_ids = c.doc_mask ? &doc_tensor : nullptr;

  auto reference = make_backend("cpu-ref");
  std::vector<float> out(q.size()), lse(batch * hq * seq), dq(q.size()), dk(k.size()), dv(v.size());
  auto t4 = [](const std::vector<float>& x, int64_t b, int64_t t, int64_t h, int64_t e) {
    return Tensor(const_cast<float*>(x.data()), DType::f32, Shape{b, t, h, e});
  };
  reference->attention_forward(t4(q, batch, seq, hq, d), t4(k, batch, seq, hkv, d),
                               t4(v, batch, seq, hkv, d), t4(out, batch, seq, hq, d),
                               Tensor(lse.data(), DType::f32, Shape{batch, hq, seq}), params);
  reference->attention_backward(t4(dout, batch, seq, hq, d), t4(q, batch, seq, hq, d),
                                t4(k, batch, seq, hkv, d), t4(v, batch, seq, hkv, d),
                                t4(out, batch, seq, hq, d),
                                Tensor(lse.data(), DType::f32, Shape{batch, hq, seq}),
                                t4(dq, batch, seq, hq, d), t4(dk, batch, seq, hkv, d),
                                t4(dv, batch, seq, hkv, d), params);

  ThreadRing ring(c.cp);
  LlamaConfig shard;
  shard.dim = static_cast<int>(q_row);
  shard.n_heads = static_cast<int>(hq);
  shard.n_kv_heads = static_cast<int>(hkv);
  const int64_t local_seq = seq / c.cp;
  std::vector<std::vector<float>> got_out(c.cp), got_dq(c.cp), got_dk(c.cp), got_dv(c.cp);
  std::vector<std::thread> ranks;
  for (int rank = 0; rank < c.cp; ++rank) {
    ranks.emplace_back([&, rank] {
      auto backend = make_backend("cpu-ref");
      ThreadRing::Ops ops(ring, rank);
      const ContextParallel cp{c.cp, rank, &ops};
      ContextParallelScratch scratch(*backend, shard, c.cp, static_cast<int>(batch), local_seq,
                                     DType::f32);
      auto lq = local_rows(q, batch, seq, q_row, cp), lk = local_rows(k, batch, seq, kv_row, cp),
           lv = local_rows(v, batch, seq, kv_row, cp),
           ldout = local_rows(dout, batch, seq, q_row, cp);
      std::vector<float> lse_local(batch * hq * local_seq);
      got_out[rank].resize(lq.size());
      got_dq[rank].resize(lq.size());
      got_dk[rank].resize(lk.size());
      got_dv[rank].resize(lv.size());
      const Tensor lse_t(lse_local.data(), DType::f32, Shape{batch, hq, local_seq});
      cp_attention_forward(*backend, cp, scratch, t4(lq, batch, local_seq, hq, d),
                           t4(lk, batch, local_seq, hkv, d), t4(lv, batch, local_seq, hkv, d),
                           t4(got_out[rank], batch, local_seq, hq, d), lse_t, params);
      cp_attention_backward(*backend, cp, scratch, t4(ldout, batch, local_seq, hq, d),
                            t4(lq, batch, local_seq, hq, d), t4(lk, batch, local_seq, hkv, d),
                            t4(lv, batch, local_seq, hkv, d),
                            t4(got_out[rank], batch, local_seq, hq, d), lse_t,
                            t4(got_dq[rank], batch, local_seq, hq, d),
                            t4(got_dk[rank], batch, local_seq, hkv, d),
                            t4(got_dv[rank], batch, local_seq, hkv, d), params);
    });
  }
  for (std::thread& t : ranks) t.join();

  double worst = 0;
  auto compare = [&](const std::vector<float>& want_full, const std::vector<float>& got,
                     int64_t row, const ContextParallel& cp, const char* what) {
    const std::vector<float> want = local_rows(want_full, batch, seq, row, cp);
    for (size_t i = 0; i < want.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::abs(got[i] - want[i])));
      ASSERT_NEAR(got[i], want[i], 2e-6) << what << " of rank " << cp.rank << " at " << i;
    }
  };
  for (int rank = 0; rank < c.cp; ++rank) {
    const ContextParallel cp{c.cp, rank, nullptr};
    compare(out, got_out[rank], q_row, cp, "out");
    compare(dq, got_dq[rank], q_row, cp, "dq");
    compare(dk, got_dk[rank], kv_row, cp, "dk");
    compare(dv, got_dv[rank], kv_row, cp, "dv");
  }
  std::printf("[ measured ] cp %d%s window %d pattern %d sinks %d: max |ring - whole| %.3g\n",
              c.cp, c.doc_mask ? " doc mask" : "", c.window, static_cast<int>(c.pattern), c.sinks,
              worst);
}

INSTANTIATE_TEST_SUITE_P(Masks, RingAttentionEqualsWholeSequence,
                         ::testing::Values(RingCase{2, false, 0}, RingCase{2, true, 0},
                                           RingCase{4, false, 0}, RingCase{4, true, 0},
                                           RingCase{4, false, 5},
                                           RingCase{4, true, 0, SparsePattern::strided, 1},
                                           RingCase{2, false, 6, SparsePattern::lines, 2}));

}  // namespace
}  // namespace anvil
