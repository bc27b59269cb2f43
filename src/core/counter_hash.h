// Counter-based hash for per-element random decisions (dropout masks). The value depends only
// on (seed, index), never on thread count or traversal order, so a backward pass re-creates a
// forward mask by hashing the same indices, and every backend (CPU, CUDA) computes the same
// bits from this one constexpr formula: splitmix64 of seed ^ (index * golden-ratio constant).
#pragma once

#include <cstdint>

namespace anvil {

// Returns splitmix64(seed ^ (index * 0x9E3779B97F4A7C15)): 64 well-mixed bits for element
// `index` of the stream `seed`.
constexpr uint64_t dropout_hash(uint64_t seed, uint64_t index) {
  uint64_t x = seed ^ (index * 0x9E3779B97F4A7C15ull);
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Returns the 24-bit threshold of a drop probability p in [0, 1): element i is kept when
// (dropout_hash(seed, i) >> 40) >= dropout_threshold(p).
constexpr uint64_t dropout_threshold(float p) {
  return static_cast<uint64_t>(static_cast<double>(p) * 16777216.0);
}

// Returns whether element `index` survives dropout with probability p under `seed`.
constexpr bool dropout_keep(uint64_t seed, uint64_t index, float p) {
  return (dropout_hash(seed, index) >> 40) >= dropout_threshold(p);
}

}  // namespace anvil
