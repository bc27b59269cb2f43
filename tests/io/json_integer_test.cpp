// Integers read from JSON files never wrap or truncate: a number that does not fit its field is
// "out of range" with the number as the file wrote it, anything else that is not an integer
// says what it got.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/error.h"
#include "io/json_util.h"

namespace anvil {
namespace {

std::string error_of(const std::string& text, bool want_unsigned_byte) {
  const nlohmann::json value = nlohmann::json::parse(text);
  try {
    if (want_unsigned_byte) {
      json_integer<uint8_t>(value, "f.json: 'x'");
    } else {
      json_integer<int32_t>(value, "f.json: 'x'");
    }
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(JsonInteger, InRangeValuesPass) {
  EXPECT_EQ(json_integer<int32_t>(nlohmann::json::parse("-2147483648"), "x"), INT32_MIN);
  EXPECT_EQ(json_integer<uint64_t>(nlohmann::json::parse("18446744073709551615"), "x"),
            UINT64_MAX);
  EXPECT_EQ(json_integer<int64_t>(nlohmann::json(int64_t{7}), "x"), 7);
  EXPECT_EQ(json_integer<uint8_t>(nlohmann::json(int64_t{255}), "x"), 255);
}

TEST(JsonInteger, OutOfRangeNamesTheValueAsWritten) {
  EXPECT_EQ(error_of("2147483648", false), "f.json: 'x' is out of range: 2147483648");
  EXPECT_EQ(error_of("-2147483649", false), "f.json: 'x' is out of range: -2147483649");
  EXPECT_EQ(error_of("18446744073709551615", false),
            "f.json: 'x' is out of range: 18446744073709551615");
  EXPECT_EQ(error_of("256", true), "f.json: 'x' is out of range: 256");
  EXPECT_EQ(error_of("-1", true), "f.json: 'x' is out of range: -1");
  // Past 64 bits nlohmann::json keeps a double; it is still out of range, not "not an integer".
  EXPECT_NE(error_of("99999999999999999999", false).find("is out of range: "), std::string::npos);
}

TEST(JsonInteger, OtherValuesAreNotIntegers) {
  EXPECT_EQ(error_of("1.5", false), "f.json: 'x' must be an integer, got 1.5");
  EXPECT_EQ(error_of("3.0", false), "f.json: 'x' must be an integer, got 3.0");
  EXPECT_EQ(error_of("\"12\"", true), "f.json: 'x' must be an integer, got \"12\"");
  EXPECT_EQ(error_of("true", false), "f.json: 'x' must be an integer, got true");
}

}  // namespace
}  // namespace anvil
