// Counter-based PRNG: splitmix64 over (seed, stream, counter), Box-Muller for normals.
#include "model/random.h"

#include <cmath>
#include <numbers>

namespace anvil {

namespace {
constexpr uint64_t kGoldenGamma = 0x9E3779B97F4A7C15ull;
constexpr double kTwoPow53Inverse = 1.0 / 9007199254740992.0;
}  // namespace

uint64_t mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 27;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 31;
  return x;
}

uint64_t fnv1a64(std::string_view text) {
  uint64_t hash = 0xCBF29CE484222325ull;
  for (char c : text) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 0x100000001B3ull;
  }
  return hash;
}

uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter) {
  const uint64_t key = mix64(seed + kGoldenGamma * (mix64(stream) | 1));
  return mix64(key + kGoldenGamma * (counter + 1));
}

double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
  return static_cast<double>(random_bits(seed, stream, counter) >> 11) * kTwoPow53Inverse;
}

void fill_normal(float* out, int64_t n, double stddev, uint64_t seed, uint64_t stream) {
  for (int64_t pair = 0; 2 * pair < n; ++pair) {
    // u1 in (0, 1] keeps the logarithm finite.
    const double u1 = 1.0 - random_uniform(seed, stream, 2 * static_cast<uint64_t>(pair));
    const double u2 = random_uniform(seed, stream, 2 * static_cast<uint64_t>(pair) + 1);
    const double radius = std::sqrt(-2.0 * std::log(u1));
    const double angle = 2.0 * std::numbers::pi * u2;
    out[2 * pair] = static_cast<float>(stddev * radius * std::cos(angle));
    if (2 * pair + 1 < n) out[2 * pair + 1] = static_cast<float>(stddev * radius * std::sin(angle));
  }
}

}  // namespace anvil
