// The device kernels of the NCCL communicator's exact reductions against the host kernels
// (comm/reduce_kernels.h), bit for bit: random rows with NaNs of several payloads and signs,
// infinities, signed zeros, subnormals and sums that overflow, for every dtype, several rank
// counts, the own row first, last or between, received rows farther apart than the count
// (scratch rows), and in place on the own row. The
// expected values are the host kernels' (IEEE adds in a fixed order, canonical NaNs), so they
// do not depend on the CPU. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "comm/nccl/rank_order_reduce.h"
#include "comm/reduce_kernels.h"
#include "core/dtype.h"
#include "core/error.h"
#include "cuda_test_util.h"

namespace anvil {
namespace {

constexpr uint32_t kSpecialF32[] = {
    0x7fc00000u, 0xffc00000u, 0x7fc12345u, 0xffbfffffu, 0x7f800001u,  // NaNs, one signalling
    0x7f800000u, 0xff800000u,                                         // +-inf
    0x00000000u, 0x80000000u,                                         // +-0
    0x00000001u, 0x807fffffu, 0x00400000u,                            // subnormals
    0x7f7fffffu, 0xff7fffffu, 0x7f000000u,                            // near overflow
};

// Returns the bits of one f32 input: a special value one time in eight, else a value of
// random sign and mantissa with an exponent in [2^-20, 2^20] (sums that round).
uint32_t random_f32_bits(std::mt19937& rng) {
  const uint32_t draw = rng();
  if (draw % 8 == 0) return kSpecialF32[(draw / 8) % std::size(kSpecialF32)];
  const uint32_t sign = rng() & 0x80000000u;
  const uint32_t exponent = 107u + rng() % 41u;
  return sign | (exponent << 23) | (rng() & 0x7fffffu);
}

// Returns `count` random elements of `dtype` as raw bytes. 16-bit floats: the top half of an
// f32 draw for bf16, any 16-bit pattern for f16 (NaNs, infinities, subnormals included), and
// a quarter of values near the format's top so sums overflow; integers: any pattern (wraps).
std::vector<uint8_t> random_row(DType dtype, int64_t count, std::mt19937& rng) {
  std::vector<uint8_t> bytes(static_cast<size_t>(count) * dtype_size(dtype));
  for (int64_t i = 0; i < count; ++i) {
    uint8_t* at = bytes.data() + static_cast<size_t>(i) * dtype_size(dtype);
    if (dtype == DType::f32) {
      const uint32_t bits = random_f32_bits(rng);
      std::memcpy(at, &bits, 4);
    } else if (dtype == DType::bf16) {
      const uint16_t bits = static_cast<uint16_t>(random_f32_bits(rng) >> 16);
      std::memcpy(at, &bits, 2);
    } else if (dtype == DType::f16) {
      const uint32_t draw = rng();
      uint16_t bits = static_cast<uint16_t>(draw);
      if (draw >> 30 == 0) bits = static_cast<uint16_t>((bits & 0x83ffu) | 0x7800u);  // ~32768
      std::memcpy(at, &bits, 2);
    } else {
      const uint32_t bits = rng();
      std::memcpy(at, &bits, dtype_size(dtype));
    }
  }
  return bytes;
}

// The host's answer: sum_in_rank_order, or max_into folded over the rows in rank order.
std::vector<uint8_t> host_reduction(const std::vector<uint8_t>& rows, int ranks, int64_t count,
                                    DType dtype, bool max) {
  const size_t row_bytes = static_cast<size_t>(count) * dtype_size(dtype);
  std::vector<uint8_t> out(row_bytes);
  if (!max) {
    sum_in_rank_order(rows.data(), ranks, count, dtype, out.data());
    return out;
  }
  std::memcpy(out.data(), rows.data(), row_bytes);
  for (int r = 1; r < ranks; ++r) max_into(rows.data() + r * row_bytes, out.data(), count, dtype);
  return out;
}

// Runs the device kernel on `rows` (ranks rows of count elements): row own_rank in a buffer
// of its own, the others `stride` elements apart in a scratch; into a separate output or
// (in_place) into the own row. Returns the result.
std::vector<uint8_t> device_reduction(const std::vector<uint8_t>& rows, int ranks, int64_t count,
                                      int own_rank, int64_t stride, DType dtype, bool max,
                                      bool in_place) {
  const size_t element = dtype_size(dtype);
  const size_t row_bytes = static_cast<size_t>(count) * element;
  const size_t stride_bytes = static_cast<size_t>(stride) * element;
  // Gaps between the received rows hold a pattern the kernel must never read (one byte more:
  // one rank receives nothing but still gets a buffer).
  std::vector<uint8_t> received(stride_bytes * (ranks - 1) + 1, 0xa5);
  for (int r = 0, row = 0; r < ranks; ++r) {
    if (r == own_rank) continue;
    std::memcpy(received.data() + row++ * stride_bytes, rows.data() + r * row_bytes, row_bytes);
  }
  const std::vector<uint8_t> own_row(rows.begin() + own_rank * row_bytes,
                                     rows.begin() + (own_rank + 1) * row_bytes);
  DeviceVector<uint8_t> device_received(received);
  DeviceVector<uint8_t> device_own(own_row);
  DeviceVector<uint8_t> device_out(std::vector<uint8_t>(row_bytes, 0));
  void* out = in_place ? static_cast<void*>(device_own.data) : device_out.data;
  const nccl::DeviceRows input{device_received.data, stride, device_own.data, own_rank, ranks};
  if (max) {
    nccl::launch_max_of_rows(input, count, dtype, out, nullptr);
  } else {
    nccl::launch_sum_in_rank_order(input, count, dtype, out, nullptr);
  }
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  return in_place ? device_own.read() : device_out.read();
}

class RankOrderReduce : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override { SKIP_WITHOUT_DEVICE(); }
};

TEST_P(RankOrderReduce, MatchesTheHostKernelsBitForBit) {
  const DType dtype = GetParam();
  std::mt19937 rng(20261205u);
  const int64_t count = 4099;  // more than one block, not a multiple of the block size
  for (int ranks : {1, 2, 3, 5, 8}) {
    std::vector<uint8_t> rows;
    for (int r = 0; r < ranks; ++r) {
      const std::vector<uint8_t> row = random_row(dtype, count, rng);
      rows.insert(rows.end(), row.begin(), row.end());
    }
    for (bool max : {false, true}) {
      const std::vector<uint8_t> expected = host_reduction(rows, ranks, count, dtype, max);
      for (int own_rank : {0, ranks / 2, ranks - 1}) {
        for (int64_t stride : {count, count + 13}) {
          for (bool in_place : {false, true}) {
            const std::vector<uint8_t> got = device_reduction(rows, ranks, count, own_rank,
                                                              stride, dtype, max, in_place);
            size_t first_difference = got.size();
            for (size_t b = 0; b < got.size() && first_difference == got.size(); ++b)
              if (got[b] != expected[b]) first_difference = b;
            EXPECT_EQ(first_difference, got.size())
                << dtype_name(dtype) << (max ? " max" : " sum") << " of " << ranks
                << " rows, own row " << own_rank << ", stride " << stride
                << (in_place ? ", in place" : "") << ": element "
                << first_difference / dtype_size(dtype) << " differs";
          }
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(EveryDtype, RankOrderReduce,
                         ::testing::Values(DType::f32, DType::bf16, DType::f16, DType::i32,
                                           DType::u32, DType::u16),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

TEST(RankOrderReduceArguments, RejectOverlappingRowsAndAMissingOwnRow) {
  // Checked before anything touches the device, so it runs everywhere.
  const nccl::DeviceRows overlapping{nullptr, 3, nullptr, 0, 2};
  EXPECT_THROW(nccl::launch_sum_in_rank_order(overlapping, 4, DType::f32, nullptr, nullptr),
               Error);
  const nccl::DeviceRows own_outside{nullptr, 4, nullptr, 2, 2};
  EXPECT_THROW(nccl::launch_max_of_rows(own_outside, 4, DType::f32, nullptr, nullptr), Error);
  const nccl::DeviceRows no_ranks{nullptr, 4, nullptr, 0, 0};
  EXPECT_THROW(nccl::launch_max_of_rows(no_ranks, 4, DType::f32, nullptr, nullptr), Error);
}

}  // namespace
}  // namespace anvil
