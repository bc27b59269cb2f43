// RoPE table construction with the reference's f32 angle arithmetic.
#include "backend/cpu/optimized/rope_table.h"

#include <cmath>
#include <cstring>
#include <utility>

#include "backend/cpu/reference/reference_ops.h"

namespace anvil::cpu_opt {
namespace {

bool same_params(const RopeParams& a, const RopeParams& b) {
  return std::memcmp(&a.theta, &b.theta, sizeof(float)) == 0 &&
         std::memcmp(&a.scaling_factor, &b.scaling_factor, sizeof(float)) == 0 &&
         std::memcmp(&a.low_freq_factor, &b.low_freq_factor, sizeof(float)) == 0 &&
         std::memcmp(&a.high_freq_factor, &b.high_freq_factor, sizeof(float)) == 0 &&
         a.original_max_position == b.original_max_position;
}

}  // namespace

RopeTables::View RopeTables::get(int64_t D, const RopeParams& params, int64_t max_position) {
  Table* table = nullptr;
  for (Table& t : tables_)
    if (t.D == D && same_params(t.params, params)) table = &t;
  if (table == nullptr) {
    tables_.push_back(Table{D, params, 0, Buffer(), Buffer()});
    table = &tables_.back();
  }
  if (max_position >= table->capacity) {
    int64_t capacity = 256;
    while (capacity <= max_position) capacity *= 2;
    const int64_t half = D / 2;
    const std::vector<float> inv_freq = cpu_ref::rope_inv_freq(D, params);
    const size_t bytes = static_cast<size_t>(capacity * half) * sizeof(float);
    Buffer cos(memory_, bytes, MemoryCategory::workspace);
    Buffer sin(memory_, bytes, MemoryCategory::workspace);
    auto* const cos_values = static_cast<float*>(cos.data());
    auto* const sin_values = static_cast<float*>(sin.data());
    // The positions the old tables hold keep their values; only the new ones are computed.
    if (table->capacity > 0) {
      std::memcpy(cos_values, table->cos.data(), table->cos.bytes());
      std::memcpy(sin_values, table->sin.data(), table->sin.bytes());
    }
    for (int64_t pos = table->capacity; pos < capacity; ++pos) {
      for (int64_t i = 0; i < half; ++i) {
        const float angle = static_cast<float>(pos) * inv_freq[i];
        cos_values[pos * half + i] = std::cos(angle);
        sin_values[pos * half + i] = std::sin(angle);
      }
    }
    table->cos = std::move(cos);
    table->sin = std::move(sin);
    table->capacity = capacity;
  }
  return View{static_cast<const float*>(table->cos.data()),
              static_cast<const float*>(table->sin.data())};
}

}  // namespace anvil::cpu_opt
