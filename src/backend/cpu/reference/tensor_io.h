// Shared plumbing of the reference ops: conversion between a tensor's storage dtype (f32,
// bf16, f16) and f32 working values. Loads widen exactly; stores round to nearest even, so
// every op rounds once per stored element.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace anvil::cpu_ref {

// Returns element i of a float tensor widened to f32.
float load_float(const Tensor& t, int64_t i);
// Stores value into element i of a float tensor, rounding to nearest even for 16-bit dtypes.
void store_float(const Tensor& t, int64_t i, float value);
// Returns `count` elements starting at `offset` widened to f32.
std::vector<float> read_floats(const Tensor& t, int64_t offset, int64_t count);
// Returns every element widened to f32.
std::vector<float> read_floats(const Tensor& t);
// Stores `count` values into elements [offset, offset + count).
void write_floats(const Tensor& t, int64_t offset, int64_t count, const float* values);
// Stores one value per element of t.
void write_floats(const Tensor& t, const std::vector<float>& values);

}  // namespace anvil::cpu_ref
