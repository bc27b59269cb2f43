// The exact host collectives: 64-bit integers and doubles travel bit for bit, strings arrive
// whole (lengths that are not a multiple of 4 included).
#include <gtest/gtest.h>

#include <bit>
#include <limits>

#include "parallel/collectives.h"

namespace anvil {
namespace {

TEST(HostCollectives, IntegersAndDoublesKeepEveryBit) {
  Communicator& world = anvil::world();
  const int64_t mine[2] = {std::numeric_limits<int64_t>::min() + world.rank(), -world.rank()};
  const std::vector<int64_t> ints = all_gather_int64s(world, mine);
  ASSERT_EQ(ints.size(), 2u * world.size());
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(ints[2 * r], std::numeric_limits<int64_t>::min() + r);
    EXPECT_EQ(ints[2 * r + 1], -r);
  }
  const double value = 0.1 * (world.rank() + 1) - 1e-300;
  const std::vector<double> doubles = all_gather_doubles(world, std::span<const double>(&value, 1));
  for (int r = 0; r < world.size(); ++r) {
    EXPECT_EQ(std::bit_cast<uint64_t>(doubles[r]), std::bit_cast<uint64_t>(0.1 * (r + 1) - 1e-300));
  }
  EXPECT_EQ(all_ranks_sum(world, int64_t{1} << 40), (int64_t{1} << 40) * world.size());
}

TEST(HostCollectives, BroadcastString) {
  Communicator& world = anvil::world();
  for (const std::string sent : {"", "a", "runs/tiny-20250101-120000", "abcd"}) {
    std::string text = world.rank() == 0 ? sent : "something else entirely";
    broadcast_string(world, text, 0);
    EXPECT_EQ(text, sent);
  }
}

}  // namespace
}  // namespace anvil
