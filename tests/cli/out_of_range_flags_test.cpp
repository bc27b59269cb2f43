// Numbers on the command line that do not fit their option are one error line naming the flag
// and the value as written, exit 1: never wrapped ("-1" as 2^64 - 1), saturated or truncated.
#include <gtest/gtest.h>

#include <string>

#include "command_runner.h"

namespace anvil {
namespace {

using test::run_anvil;

void expect_out_of_range(const std::string& args, const std::string& line) {
  const test::CommandResult result = run_anvil(args);
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_EQ(result.output, "anvil: error: " + line + "\n");
}

TEST(OutOfRangeFlags, IntegerOptionsNameTheValueAsWritten) {
  expect_out_of_range("prepare --seed -1 --input x --tokenizer y --out z",
                      "[anvil prepare] --seed: out of range: -1 (see 'anvil prepare --help')");
  expect_out_of_range(
      "prepare --seed 99999999999999999999 --input x --tokenizer y --out z",
      "[anvil prepare] --seed: out of range: 99999999999999999999 (see 'anvil prepare --help')");
  expect_out_of_range(
      "generate --max-new-tokens 3000000000 --prompt x",
      "[anvil generate] --max-new-tokens: out of range: 3000000000 (see 'anvil generate --help')");
  expect_out_of_range("generate --max-new-tokens -99999999999999999999 --prompt x",
                      "[anvil generate] --max-new-tokens: out of range: -99999999999999999999 "
                      "(see 'anvil generate --help')");
}

TEST(OutOfRangeFlags, ConfigOverridesNameTheValueAsWritten) {
  expect_out_of_range("train --training.steps=99999999999999999999",
                      "[config] --training.steps is out of range: 99999999999999999999");
  expect_out_of_range("train --optimizer.lr 1e400",
                      "[config] --optimizer.lr is out of range: 1e400");
}

}  // namespace
}  // namespace anvil
