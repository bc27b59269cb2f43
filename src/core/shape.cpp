// Shape bounds checks and formatting.
#include "core/shape.h"

#include "core/error.h"

namespace anvil {

Shape::Shape(std::initializer_list<int64_t> dims) {
  ANVIL_CHECK(dims.size() <= kMaxRank, "[shape] rank {} exceeds the maximum of {}", dims.size(),
              kMaxRank);
  for (int64_t d : dims) {
    ANVIL_CHECK(d >= 0, "[shape] negative dimension {}", d);
    dims_[rank_++] = d;
  }
}

int64_t Shape::operator[](int i) const {
  ANVIL_DCHECK(i >= 0 && i < rank_, "[shape] index {} out of range for rank {}", i, rank_);
  return dims_[i];
}

int64_t& Shape::operator[](int i) {
  ANVIL_DCHECK(i >= 0 && i < rank_, "[shape] index {} out of range for rank {}", i, rank_);
  return dims_[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

bool Shape::operator==(const Shape& other) const {
  if (rank_ != other.rank_) return false;
  for (int i = 0; i < rank_; ++i)
    if (dims_[i] != other.dims_[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "(";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + ")";
}

}  // namespace anvil
