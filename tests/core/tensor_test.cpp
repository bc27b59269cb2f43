// Shape, Tensor views, Buffer ownership and the check macros.
#include <gtest/gtest.h>

#include "core/buffer.h"
#include "core/error.h"
#include "core/tensor.h"
#include "core/threading.h"

namespace anvil {
namespace {

TEST(Shape, NumelRowsAndFormatting) {
  Shape s{2, 3, 4};
  EXPECT_EQ(s.numel(), 24);
  EXPECT_EQ(s.rows(), 6);
  EXPECT_EQ(s.back(), 4);
  EXPECT_EQ(s.str(), "(2, 3, 4)");
  EXPECT_EQ(Shape{}.numel(), 1);
  EXPECT_THROW((Shape{1, 2, 3, 4, 5}), Error);
}

TEST(Tensor, SliceIndexViewAndFlat) {
  Buffer buffer(HostAllocator::instance(), 24 * sizeof(float), MemoryCategory::workspace);
  Tensor t = buffer.as(DType::f32, Shape{2, 3, 4});
  for (int i = 0; i < 24; ++i) t.f32()[i] = static_cast<float>(i);
  EXPECT_EQ(t[1].shape, (Shape{3, 4}));
  EXPECT_EQ(t[1].f32()[0], 12.0f);
  EXPECT_EQ(t.slice(1, 2).f32()[5], 17.0f);
  EXPECT_EQ(t.view(Shape{6, 4})[5].f32()[3], 23.0f);
  EXPECT_EQ(t.flat(10, 4).f32()[0], 10.0f);
  EXPECT_THROW(t.view(Shape{5, 5}), Error);
  EXPECT_THROW(t.slice(1, 3), Error);
  EXPECT_THROW(buffer.as(DType::f32, Shape{25}), Error);
}

TEST(Error, CarriesLocationAndMessage) {
  try {
    ANVIL_CHECK(1 + 1 == 3, "[test] value {} is wrong", 42);
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "[test] value 42 is wrong");
    EXPECT_NE(e.where().find("tensor_test.cpp:"), std::string::npos);
  }
}

TEST(Threads, FlagEnvAndValidation) {
  EXPECT_EQ(configure_threads(3), 3);
  EXPECT_EQ(num_threads(), 3);
  EXPECT_THROW(configure_threads(0), Error);
  setenv("ANVIL_NUM_THREADS", "2", 1);
  EXPECT_EQ(configure_threads(std::nullopt), 2);
  setenv("ANVIL_NUM_THREADS", "two", 1);
  EXPECT_THROW(configure_threads(std::nullopt), Error);
  unsetenv("ANVIL_NUM_THREADS");
  EXPECT_EQ(configure_threads(std::nullopt), available_cores());
}

}  // namespace
}  // namespace anvil
