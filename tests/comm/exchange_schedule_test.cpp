// The chunked all-to-all schedule behind the NCCL communicator's ordered reductions: every
// element lies in exactly one piece, which fits a scratch row, the scratch stays under two
// parts whatever the world size, and uneven parts end in empty pieces.
#include <gtest/gtest.h>

#include <vector>

#include "comm/exchange_schedule.h"
#include "core/error.h"

namespace anvil {
namespace {

const std::vector<int64_t> kCounts = {0, 1, 2, 3, 7, 8, 64, 1000, 1001, 65537};
const std::vector<int> kRanks = {1, 2, 3, 4, 5, 8, 16, 64};

TEST(ExchangeSchedule, CoversEveryElementOnceInPiecesThatFitTheScratch) {
  for (int64_t count : kCounts) {
    for (int ranks : kRanks) {
      const ExchangeSchedule schedule = plan_exchange(count, ranks);
      std::vector<int> seen(static_cast<size_t>(count), 0);
      for (int part = 0; part < ranks; ++part) {
        int64_t next = schedule.part(part).begin;  // pieces run through the part in order
        for (int round = 0; round < schedule.rounds; ++round) {
          const ElementRange piece = schedule.piece(part, round);
          EXPECT_LE(piece.size(), schedule.chunk);
          if (piece.empty()) continue;
          EXPECT_EQ(piece.begin, next) << count << " over " << ranks;
          next = piece.end;
          for (int64_t i = piece.begin; i < piece.end; ++i) ++seen[static_cast<size_t>(i)];
        }
        EXPECT_EQ(next, schedule.part(part).end) << count << " over " << ranks;
      }
      for (int64_t i = 0; i < count; ++i)
        ASSERT_EQ(seen[static_cast<size_t>(i)], 1) << "element " << i << " of " << count;
    }
  }
}

TEST(ExchangeSchedule, ScratchIsAboutTwoPartsAndRoundsAtMostHalfTheRanks) {
  for (int64_t count : kCounts) {
    for (int ranks : kRanks) {
      const ExchangeSchedule schedule = plan_exchange(count, ranks);
      const int64_t longest_part = (count + ranks - 1) / ranks;
      EXPECT_LT(schedule.scratch_elements(), 2 * longest_part + ranks);
      if (ranks == 2) {
        EXPECT_EQ(schedule.scratch_elements(), longest_part);
      }
      EXPECT_LE(schedule.chunk, longest_part);
      EXPECT_LE(schedule.rounds, (ranks + 1) / 2);
      EXPECT_EQ(schedule.rounds == 0, count == 0);
    }
  }
  // 8 ranks, 800 elements: parts of 100, pieces of 25, four rounds, 7 rows of scratch.
  const ExchangeSchedule eight = plan_exchange(800, 8);
  EXPECT_EQ(eight.chunk, 25);
  EXPECT_EQ(eight.rounds, 4);
  EXPECT_EQ(eight.scratch_elements(), 175);
  EXPECT_EQ(eight.piece(3, 2).begin, 350);
  EXPECT_EQ(eight.piece(3, 2).end, 375);
  // One rank: one round over the whole tensor and nothing received.
  const ExchangeSchedule one = plan_exchange(1000, 1);
  EXPECT_EQ(one.rounds, 1);
  EXPECT_EQ(one.scratch_elements(), 0);
}

TEST(ExchangeSchedule, PartsAreTheChunkSplitWithUnevenTails) {
  // 10 elements over 4 ranks: parts 0-2, 2-5, 5-7, 7-10; pieces of ceil(2 * 3 / 4) = 2.
  const ExchangeSchedule schedule = plan_exchange(10, 4);
  EXPECT_EQ(schedule.chunk, 2);
  EXPECT_EQ(schedule.rounds, 2);
  EXPECT_EQ(schedule.part(1).begin, 2);
  EXPECT_EQ(schedule.part(1).end, 5);
  EXPECT_EQ(schedule.piece(1, 1).begin, 4);
  EXPECT_EQ(schedule.piece(1, 1).end, 5);
  EXPECT_TRUE(schedule.piece(0, 1).empty());  // part 0 has 2 elements: one round is enough
}

TEST(ExchangeSchedule, RejectsBadArguments) {
  EXPECT_THROW(plan_exchange(-1, 2), Error);
  EXPECT_THROW(plan_exchange(4, 0), Error);
}

}  // namespace
}  // namespace anvil
