// plan_exchange and the piece arithmetic (see exchange_schedule.h).
#include "comm/exchange_schedule.h"

#include <algorithm>

#include "comm/reduce_kernels.h"
#include "core/error.h"

namespace anvil {

ElementRange ExchangeSchedule::part(int part) const {
  return {chunk_begin(count, ranks, part), chunk_begin(count, ranks, part + 1)};
}

ElementRange ExchangeSchedule::piece(int part_index, int round) const {
  const ElementRange whole = part(part_index);
  const int64_t begin = std::min(whole.end, whole.begin + chunk * round);
  return {begin, std::min(whole.end, begin + chunk)};
}

ExchangeSchedule plan_exchange(int64_t count, int ranks) {
  ANVIL_CHECK(count >= 0 && ranks >= 1, "[comm] exchange of {} elements over {} ranks", count,
              ranks);
  ExchangeSchedule schedule;
  schedule.count = count;
  schedule.ranks = ranks;
  const int64_t longest_part = (count + ranks - 1) / ranks;
  // Two parts of scratch in all (more rounds would only add latency, fewer would need more
  // scratch), and never a piece longer than a part (one or two ranks: a single round).
  schedule.chunk = std::min(longest_part, (2 * longest_part + ranks - 1) / ranks);
  if (schedule.chunk > 0)
    schedule.rounds = static_cast<int>((longest_part + schedule.chunk - 1) / schedule.chunk);
  return schedule;
}

}  // namespace anvil
