// Deterministic random numbers for the data layer. Everything here is defined bit for bit
// (splitmix64 and 128-bit multiply-shift), never through <random> distributions, whose output
// differs between standard libraries: a seed must select the same samples on every machine.
// The exact formulas are part of the on-disk/resume contract and are documented in
// docs/formats.md ("Sample order"); changing them changes which data a seed trains on.
#pragma once

#include <cstdint>
#include <vector>

namespace anvil::data {

// Returns splitmix64's finaliser of x: a bijective 64-bit mix with full avalanche.
constexpr uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Returns a hash of (a, b) built from two chained mixes; used as a counter-based generator.
constexpr uint64_t hash_pair(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ b); }

// Returns a hash of (a, b, c).
constexpr uint64_t hash_triple(uint64_t a, uint64_t b, uint64_t c) {
  return mix64(hash_pair(a, b) ^ c);
}

// Maps a 64-bit hash to a double in [0, 1) using its top 53 bits.
constexpr double unit_interval(uint64_t h) {
  return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// The splitmix64 sequence generator: state advances by the golden gamma, output is mix64.
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  // Returns the next 64-bit value.
  uint64_t next() {
    const uint64_t out = mix64(state_);
    state_ += 0x9E3779B97F4A7C15ull;
    return out;
  }
  // Returns a value in [0, bound) by 128-bit multiply-shift (bias below 2^-32 for bound < 2^32).
  uint64_t below(uint64_t bound) {
    return static_cast<uint64_t>((static_cast<unsigned __int128>(next()) * bound) >> 64);
  }

 private:
  uint64_t state_;
};

// Returns the permutation of [0, n) for (seed, epoch): Fisher-Yates from the last element down,
// drawing j = below(i + 1) from SplitMix64(hash_pair(seed, epoch)).
std::vector<uint32_t> epoch_permutation(uint32_t n, uint64_t seed, uint64_t epoch);

}  // namespace anvil::data
