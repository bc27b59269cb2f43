// Tensor: a non-owning view (pointer, dtype, shape, device). No autograd and no reference
// counting: whoever allocated the memory (a Buffer, an arena, an mmap) outlives the views.
// Views are always contiguous row-major; slicing the leading dimension keeps that true.
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/dtype.h"
#include "core/error.h"
#include "core/shape.h"

namespace anvil {

// sim: the simulated device (backend/sim), whose memory the host cannot touch.
enum class DeviceType : uint8_t { cpu, cuda, sim };

struct Device {
  DeviceType type = DeviceType::cpu;
  int index = 0;
  bool operator==(const Device&) const = default;
  bool is_cpu() const { return type == DeviceType::cpu; }
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Shape shape;
  Device device;

  Tensor() = default;
  Tensor(void* data_, DType dtype_, Shape shape_, Device device_ = {})
      : data(data_), dtype(dtype_), shape(shape_), device(device_) {}

  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype); }
  bool defined() const { return data != nullptr; }

  // Returns the data as T*, checking that T matches the dtype's size class.
  template <typename T>
  T* ptr() const {
    ANVIL_DCHECK(sizeof(T) == dtype_size(dtype), "[tensor] element size mismatch");
    return static_cast<T*>(data);
  }
  float* f32() const {
    ANVIL_DCHECK(dtype == DType::f32, "[tensor] expected f32, got {}", dtype_name(dtype));
    return static_cast<float*>(data);
  }
  uint16_t* u16() const { return ptr<uint16_t>(); }
  int32_t* i32() const {
    ANVIL_DCHECK(dtype == DType::i32, "[tensor] expected i32, got {}", dtype_name(dtype));
    return static_cast<int32_t*>(data);
  }

  // Returns the same memory under a new shape with the same element count.
  Tensor view(Shape new_shape) const;
  // Returns rows [begin, end) of the leading dimension.
  Tensor slice(int64_t begin, int64_t end) const;
  // Returns element index `i` of the leading dimension with that dimension dropped.
  Tensor operator[](int64_t i) const;
  // Returns a flat view of `count` elements starting at element `offset`.
  Tensor flat(int64_t offset, int64_t count) const;
};

// Checks that a tensor has the expected shape; `what` names it in the message.
void check_shape(const Tensor& t, const Shape& expected, const char* what);
// Checks that a tensor has the expected dtype.
void check_dtype(const Tensor& t, DType expected, const char* what);

}  // namespace anvil
