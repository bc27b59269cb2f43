// Argument validation: every backend must reject bad shapes and dtypes with anvil::Error (one
// clear "[op] ..." line) instead of crashing or writing garbage. Ids and targets are data: a
// host backend rejects a bad one before writing anything; a device backend never reads them
// back to check (its caller checks them on the host before upload, tests/model's
// BadIdsAreRefusedOnTheHost), and its kernels must then treat a bad one safely: a zero row, an
// ignored target, nothing written outside the tensors.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "core/error.h"
#include "error_message.h"
#include "op_driver.h"

namespace anvil::test {
namespace {


HostTensor zeros(DType dtype, Shape shape) {
  return HostTensor{dtype, shape, std::vector<double>(static_cast<size_t>(shape.numel()), 0.0)};
}

TEST(BadInput, OutOfRangeTokenIds) {
  for (const auto& backend : available_backends()) {
    Workspace ws(*backend);
    Rng rng(1);
    const HostTensor table_values = random_tensor(rng, DType::f32, Shape{32000, 4});
    const Tensor table = ws.upload("table", table_values);
    const Tensor ids = ws.upload("ids", int_tensor(Shape{3}, {5, 31999, 70000}));
    const Tensor out = ws.upload("out", zeros(DType::f32, Shape{3, 4}));
    const Tensor negative = ws.upload("negative", int_tensor(Shape{1}, {-1}));
    const Tensor dtable = ws.upload("dtable", zeros(DType::f32, Shape{32000, 4}));
    if (!backend->device().is_cpu()) {
      backend->embedding_forward(ids, table, out);
      backend->embedding_backward(ids, out, dtable);
      const std::vector<double> rows = ws.download("out");
      for (int c = 0; c < 4; ++c) {
        EXPECT_EQ(rows[c], table_values.values[5 * 4 + c]) << backend->name();
        EXPECT_EQ(rows[8 + c], 0.0) << backend->name() << ": a bad id reads as a zero row";
      }
      std::printf("[ops] bad input on %s: embedding id 70000 reads as a zero row (a device "
                  "backend's caller checks ids)\n", backend->name().c_str());
      continue;
    }
    const std::string message =
        error_message([&] { backend->embedding_forward(ids, table, out); });
    EXPECT_NE(message.find("[embedding] token id 70000 out of range [0, 32000)"), std::string::npos)
        << backend->name() << ": " << message;
    for (double v : ws.download("out")) EXPECT_EQ(v, 0.0) << backend->name() << " wrote output";
    EXPECT_THROW(backend->embedding_forward(negative, table, out.slice(0, 1)), Error);
    EXPECT_THROW(backend->embedding_backward(ids, out, dtable), Error);
    std::printf("[ops] bad input on %s: embedding ids 70000 and -1 rejected: %s\n",
                backend->name().c_str(), message.c_str());
  }
}

TEST(BadInput, CrossEntropyTargetOutOfRange) {
  for (const auto& backend : available_backends()) {
    Workspace ws(*backend);
    const Tensor logits = ws.upload("logits", zeros(DType::f32, Shape{2, 37}));
    const Tensor targets = ws.upload("targets", int_tensor(Shape{2}, {3, 70000}));
    const Tensor losses = ws.upload("losses", zeros(DType::f32, Shape{2}));
    const Tensor negative = ws.upload("negative", int_tensor(Shape{2}, {3, -5}));
    if (!backend->device().is_cpu()) {
      const Tensor dlogits = ws.upload("dlogits", zeros(DType::f32, Shape{2, 37}));
      backend->cross_entropy(logits, targets, nullptr, -100, losses, &dlogits, 1.0f);
      const std::vector<double> loss = ws.download("losses");
      EXPECT_NEAR(loss[0], std::log(37.0), 1e-5) << backend->name();
      EXPECT_EQ(loss[1], 0.0) << backend->name() << ": a bad target counts as ignored";
      const std::vector<double> grad = ws.download("dlogits");
      for (int j = 0; j < 37; ++j) EXPECT_EQ(grad[37 + j], 0.0) << backend->name();
      continue;
    }
    const std::string message = error_message(
        [&] { backend->cross_entropy(logits, targets, nullptr, -100, losses, nullptr, 1.0f); });
    EXPECT_NE(message.find("[cross_entropy] target 70000 out of range [0, 37)"), std::string::npos)
        << backend->name() << ": " << message;
    EXPECT_THROW(backend->cross_entropy(logits, negative, nullptr, -100, losses, nullptr, 1.0f),
                 Error);
  }
}

TEST(BadInput, ShardOpsRejectNegativeIdsAndTargetsOnly) {
  for (const auto& backend : available_backends()) {
    Workspace ws(*backend);
    Backend& be = *backend;
    const DType f32 = DType::f32, bf16 = DType::bf16;
    Rng rng(2);
    // A shard of rows [100, 104) of a larger table; ids anywhere else are fine.
    const Tensor table = ws.upload("table", random_tensor(rng, f32, Shape{4, 5}));
    const Tensor out = ws.upload("out", zeros(f32, Shape{3, 5}));
    const Tensor dtable = ws.upload("dtable", zeros(f32, Shape{4, 5}));
    const Tensor far_ids = ws.upload("far_ids", int_tensor(Shape{3}, {101, 70000, 0}));
    EXPECT_NO_THROW(be.embedding_shard_forward(far_ids, table, out, 100)) << be.name();
    EXPECT_NO_THROW(be.embedding_shard_backward(far_ids, out, dtable, 100)) << be.name();
    const Tensor ids = ws.upload("ids", int_tensor(Shape{3}, {101, -1, 102}));
    const Tensor untouched = ws.upload("untouched", zeros(f32, Shape{3, 5}));
    // Negative ids: rejected where the host reads them, a zero row on a device.
    const bool host = be.device().is_cpu();
    std::string id_message = "a zero row";
    if (host) {
      id_message = error_message([&] { be.embedding_shard_forward(ids, table, untouched, 100); });
      EXPECT_NE(id_message.find("[embedding_shard] token id -1 is negative at position 1"),
                std::string::npos) << be.name() << ": " << id_message;
      for (double v : ws.download("untouched")) EXPECT_EQ(v, 0.0) << be.name() << " wrote output";
      EXPECT_THROW(be.embedding_shard_backward(ids, out, dtable, 100), Error);
    } else {
      be.embedding_shard_forward(ids, table, untouched, 100);
      const std::vector<double> rows = ws.download("untouched");
      for (int c = 0; c < 5; ++c) EXPECT_EQ(rows[5 + c], 0.0) << be.name();
    }
    EXPECT_THROW(be.embedding_shard_forward(far_ids, table, out, -1), Error);  // begin < 0
    EXPECT_THROW(be.embedding_shard_forward(far_ids, table, out.view(Shape{5, 3}), 100), Error);
    const Tensor dtable_bf16 = ws.upload("dtable_bf16", zeros(bf16, Shape{4, 5}));
    EXPECT_THROW(be.embedding_shard_backward(far_ids, out, dtable_bf16, 100), Error);
    EXPECT_THROW(be.embedding_shard_forward(out.view(Shape{15}), table, out, 100), Error);

    // A shard of columns [37, 74): targets of other shards and ignore_index are normal.
    const Tensor logits = ws.upload("logits", zeros(f32, Shape{2, 37}));
    const Tensor stats = ws.upload("stats", zeros(f32, Shape{2, 3}));
    const Tensor lse = ws.upload("lse", zeros(f32, Shape{2}));
    const Tensor dlogits = ws.upload("dlogits", zeros(f32, Shape{2, 37}));
    const Tensor far_targets = ws.upload("far_targets", int_tensor(Shape{2}, {70000, -100}));
    EXPECT_NO_THROW(be.cross_entropy_shard_stats(logits, far_targets, -100, 37, stats));
    EXPECT_NO_THROW(be.cross_entropy_shard_backward(logits, far_targets, nullptr, -100, 37, lse,
                                                    dlogits, 1.0f));
    const Tensor negative = ws.upload("negative", int_tensor(Shape{2}, {3, -5}));
    std::string target_message = "an ignored row";
    if (host) {
      target_message =
          error_message([&] { be.cross_entropy_shard_stats(logits, negative, -100, 37, stats); });
      EXPECT_NE(target_message.find("[cross_entropy_shard_stats] target -5 is negative at row 1 "
                                    "(ignore_index is -100)"),
                std::string::npos) << be.name() << ": " << target_message;
      EXPECT_THROW(be.cross_entropy_shard_backward(logits, negative, nullptr, -100, 37, lse,
                                                   dlogits, 1.0f),
                   Error);
    } else {
      be.cross_entropy_shard_backward(logits, negative, nullptr, -100, 37, lse, dlogits, 1.0f);
      const std::vector<double> grad = ws.download("dlogits");
      for (int j = 0; j < 37; ++j) EXPECT_EQ(grad[37 + j], 0.0) << be.name();
    }
    const Tensor stats_narrow = ws.upload("stats_narrow", zeros(f32, Shape{2, 2}));
    EXPECT_THROW(be.cross_entropy_shard_stats(logits, far_targets, -100, 37, stats_narrow), Error);
    const Tensor int_logits = ws.upload("int_logits", int_tensor(Shape{2, 1}, {0, 0}));
    EXPECT_THROW(be.cross_entropy_shard_stats(int_logits, far_targets, -100, 37, stats), Error);
    EXPECT_THROW(be.cross_entropy_shard_stats(logits, far_targets, -100, -37, stats), Error);
    const Tensor lse_long = ws.upload("lse_long", zeros(f32, Shape{3}));
    EXPECT_THROW(be.cross_entropy_shard_backward(logits, far_targets, nullptr, -100, 37,
                                                 lse_long, dlogits, 1.0f),
                 Error);
    const Tensor dlogits_wide = ws.upload("dlogits_wide", zeros(f32, Shape{2, 38}));
    EXPECT_THROW(be.cross_entropy_shard_backward(logits, far_targets, nullptr, -100, 37, lse,
                                                 dlogits_wide, 1.0f),
                 Error);
    const Tensor mask_bf16 = ws.upload("mask_bf16", zeros(bf16, Shape{2}));
    EXPECT_THROW(be.cross_entropy_shard_backward(logits, far_targets, &mask_bf16, -100, 37, lse,
                                                 dlogits, 1.0f),
                 Error);
    std::printf("[ops] bad input on %s: shard ops accept ids/targets outside the shard; a "
                "negative one: %s / %s\n",
                be.name().c_str(), id_message.c_str(), target_message.c_str());
  }
}

TEST(BadInput, ShapeAndDtypeMismatches) {
  for (const auto& backend : available_backends()) {
    Workspace ws(*backend);
    Backend& be = *backend;
    const DType f32 = DType::f32, bf16 = DType::bf16;
    const Tensor a = ws.upload("a", zeros(f32, Shape{4, 5}));
    const Tensor b = ws.upload("b", zeros(f32, Shape{6, 3}));
    const Tensor b_bf16 = ws.upload("b_bf16", zeros(bf16, Shape{5, 3}));
    const Tensor c = ws.upload("c", zeros(f32, Shape{4, 3}));
    EXPECT_THROW(be.matmul(a, b, c, false, false), Error);       // K: 5 vs 6
    EXPECT_THROW(be.matmul(a, b_bf16, c, false, false), Error);  // a f32, b bf16
    EXPECT_THROW(be.matmul(a, b, c, true, true), Error);         // c is not (5, 6)
    EXPECT_THROW(be.matmul(a.view(Shape{20}), b, c, false, false), Error);  // rank 1

    const Tensor x = ws.upload("x", zeros(f32, Shape{3, 8}));
    const Tensor weight = ws.upload("weight", zeros(f32, Shape{7}));
    const Tensor rstd = ws.upload("rstd", zeros(f32, Shape{3}));
    EXPECT_THROW(be.rmsnorm_forward(x, weight, x, rstd, 1e-5f), Error);

    const Tensor odd = ws.upload("odd", zeros(f32, Shape{1, 2, 1, 5}));
    const Tensor positions = ws.upload("positions", int_tensor(Shape{1, 2}, {0, 1}));
    EXPECT_THROW(be.rope_forward(odd, odd, positions, RopeParams{}), Error);  // odd head_dim
    const Tensor heads = ws.upload("heads", zeros(f32, Shape{1, 3, 1, 4}));
    EXPECT_THROW(be.rope_forward(heads, heads, positions, RopeParams{}), Error);  // T 3 vs 2

    const Tensor q = ws.upload("q", zeros(f32, Shape{1, 4, 3, 8}));
    const Tensor kv = ws.upload("kv", zeros(f32, Shape{1, 4, 2, 8}));
    const Tensor lse = ws.upload("lse", zeros(f32, Shape{1, 3, 4}));
    EXPECT_THROW(be.attention_forward(q, kv, kv, q, lse, AttentionParams{}), Error);  // 3 % 2
    const Tensor q4 = ws.upload("q4", zeros(f32, Shape{1, 4, 4, 8}));
    const Tensor lse4 = ws.upload("lse4", zeros(f32, Shape{1, 4, 4}));
    const Tensor doc_f32 = ws.upload("doc_f32", zeros(f32, Shape{1, 4}));
    AttentionParams with_float_docs;
    with_float_docs.doc_ids = &doc_f32;
    EXPECT_THROW(be.attention_forward(q4, kv, kv, q4, lse4, with_float_docs), Error);
    EXPECT_THROW(be.attention_forward(q4, kv, kv, q4, lse, AttentionParams{}), Error);  // lse

    EXPECT_THROW(be.swiglu_forward(x, a, x), Error);
    EXPECT_THROW(be.add(x, a, x), Error);
    const Tensor ints = ws.upload("ints", int_tensor(Shape{3}, {1, 2, 3}));
    EXPECT_THROW(be.cast(rstd, ints), Error);
    EXPECT_THROW(be.sum_squares(ints), Error);
    EXPECT_THROW(be.copy(x, rstd), Error);  // 96 vs 12 bytes

    const Tensor param = ws.upload("param", zeros(f32, Shape{8}));
    const Tensor short_grad = ws.upload("short_grad", zeros(f32, Shape{7}));
    EXPECT_THROW(be.adamw_step(param, short_grad, param, param, AdamWParams{}, nullptr), Error);
    std::printf("[ops] bad input on %s: matmul, rmsnorm, rope, attention, swiglu, add, cast, "
                "sum_squares, copy and adamw mismatches rejected\n", be.name().c_str());
  }
}

TEST(BadInput, CpuBackendsRejectDeviceTensors) {
  for (const auto& backend : available_backends()) {
    if (!backend->device().is_cpu()) continue;
    Workspace ws(*backend);
    Tensor x = ws.upload("x", zeros(DType::f32, Shape{4}));
    x.device = Device{DeviceType::cuda, 0};
    EXPECT_THROW(backend->scale(x, 2.0f), Error) << backend->name();
    EXPECT_THROW(backend->fill_zero(x), Error) << backend->name();
  }
}

}  // namespace
}  // namespace anvil::test
