// Shape: up to 4 dimensions, row-major and contiguous. Kept as a small value type so tensor
// views copy cheaply and no heap allocation happens when slicing in hot loops.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

namespace anvil {

class Shape {
 public:
  static constexpr int kMaxRank = 4;

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const;
  int64_t& operator[](int i);
  // Returns the product of all dimensions (1 for rank 0).
  int64_t numel() const;
  // Returns dimension i counted from the end: back(0) is the last dimension.
  int64_t back(int i = 0) const { return (*this)[rank_ - 1 - i]; }
  // Returns the product of all dimensions but the last (the "rows" of a row-major matrix).
  int64_t rows() const { return rank_ == 0 ? 1 : numel() / back(); }
  bool operator==(const Shape& other) const;
  // Returns "(2, 3, 4)".
  std::string str() const;

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

}  // namespace anvil
