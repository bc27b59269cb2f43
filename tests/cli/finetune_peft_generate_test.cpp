// `anvil generate --adapter` with an adapter made by peft itself: the tiny Llama and LoRA
// adapter of tests/model/golden/peft_llama (tools/golden/make_peft_golden.py, all seven
// targets, non-zero B) give, for each recorded token row, the greedy next token that
// transformers + peft's logits give (argmax of the last position).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "io/safetensors_collection.h"
#include "train_test_support.h"

namespace anvil {
namespace {

TEST(FinetunePeftGenerate, GreedyNextTokenMatchesPeftLogits) {
  const std::string dir = std::string(ANVIL_TEST_DATA) + "/model/golden/peft_llama";
  const SafetensorsCollection expected = SafetensorsCollection::open(dir + "/expected.safetensors");
  const SafetensorsEntry& tokens = expected.at("tokens");
  const SafetensorsEntry& logits = expected.at("logits");
  const int64_t rows = tokens.shape[0], seq = tokens.shape[1], vocab = logits.shape[2];
  const auto* ids = reinterpret_cast<const int32_t*>(tokens.data);
  std::vector<float> all(static_cast<size_t>(logits.numel()));
  logits.read_f32(all);
  for (int64_t row = 0; row < rows; ++row) {
    std::string prompt;
    for (int64_t t = 0; t < seq; ++t) prompt += std::to_string(ids[row * seq + t]) + " ";
    const float* last = all.data() + (row * seq + seq - 1) * vocab;
    const int64_t want = std::max_element(last, last + vocab) - last;
    const auto result = testing_support::run_anvil(
        "generate --model " + dir + "/base --adapter " + dir + "/adapter --prompt-ids \"" +
        prompt + "\" --print-ids --greedy --max-new-tokens 1 --threads 1");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    // The ids come first, then the [generate] summary line; the base's EOS (id 2) would end
    // generation before anything is printed.
    const std::string first_line = result.output.substr(0, result.output.find('\n'));
    EXPECT_EQ(first_line, want == 2 ? "" : std::to_string(want)) << "row " << row << ": "
                                                                 << result.output;
    EXPECT_NE(result.output.find("with the LoRA adapter"), std::string::npos) << result.output;
  }
}

}  // namespace
}  // namespace anvil
