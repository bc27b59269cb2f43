// `anvil generate --model <hf-dir>`: greedy ids from a Hugging Face directory equal the ones
// transformers produced for the same prompt (fixtures from tools/golden/make_hf_golden.py),
// and bad --prompt-ids get one clear error line.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>

#include "command_runner.h"

namespace {

using anvil::test::CommandResult;
using anvil::test::run_shell;

TEST(GenerateCli, HfModelGreedyIdsMatchTransformers) {
  const std::string dir = std::string(ANVIL_TEST_DATA) + "/eval/golden/llama3";
  const nlohmann::json golden = nlohmann::json::parse(std::ifstream(dir + "/golden.json"));
  std::string prompt, expected;
  for (int id : golden.at("prompt")) prompt += (prompt.empty() ? "" : " ") + std::to_string(id);
  for (int id : golden.at("greedy_tokens"))
    expected += (expected.empty() ? "" : " ") + std::to_string(id);
  const CommandResult result =
      run_shell(std::string(ANVIL_BINARY) + " generate --model " + dir + " --prompt-ids \"" +
                  prompt + "\" --print-ids --greedy --max-new-tokens 20 --threads 1");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output.substr(0, result.output.find('\n')), expected) << result.output;
}

TEST(GenerateCli, BadPromptIdsAreOneLineErrors) {
  const std::string dir = std::string(ANVIL_TEST_DATA) + "/eval/golden/llama3";
  const CommandResult result = run_shell(std::string(ANVIL_BINARY) + " generate --model " + dir +
                                           " --prompt-ids \"1 99999\" --print-ids");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_EQ(result.output,
            "anvil: error: [generate] --prompt-ids: '99999' is not a token id in [0, 320)\n");
}

}  // namespace
