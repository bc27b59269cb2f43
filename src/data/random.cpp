// Seeded epoch permutations (see random.h for the contract).
#include "data/random.h"

#include <numeric>
#include <utility>

namespace anvil::data {

std::vector<uint32_t> epoch_permutation(uint32_t n, uint64_t seed, uint64_t epoch) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  SplitMix64 rng(hash_pair(seed, epoch));
  for (uint32_t i = n; i > 1; --i) {
    const uint64_t j = rng.below(i);
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

}  // namespace anvil::data
