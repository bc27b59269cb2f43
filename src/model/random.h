// Counter-based random numbers for weight init and sampling. Every value is a pure function
// of (seed, stream, counter) through the splitmix64 finalizer, so results do not depend on
// the standard library's distributions, on thread count or on the order values are drawn in.
// Normals use Box-Muller in double precision on a pair of uniforms.
#pragma once

#include <cstdint>
#include <string_view>

namespace anvil {

// Returns the splitmix64 finalizer of x: a bijective 64-bit mix.
uint64_t mix64(uint64_t x);
// Returns the 64-bit FNV-1a hash of a string (stable stream ids from parameter names).
uint64_t fnv1a64(std::string_view text);
// Returns the raw 64-bit value number `counter` of stream (seed, stream).
uint64_t random_bits(uint64_t seed, uint64_t stream, uint64_t counter);
// Returns a uniform double in [0, 1) from random_bits (53 significant bits).
double random_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
// Fills out[0, n) with normal(0, stddev) values: elements 2j and 2j+1 are the cosine and sine
// halves of Box-Muller on the uniforms drawn at counters 2j and 2j+1 of (seed, stream).
void fill_normal(float* out, int64_t n, double stddev, uint64_t seed, uint64_t stream);

}  // namespace anvil
