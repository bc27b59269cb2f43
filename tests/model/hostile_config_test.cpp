// Hostile numbers in model config files: adapter_config.json and config.json values that do
// not fit their field are one error naming the file and the value as written, never narrowed.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "model/hf_config.h"
#include "model/peft_adapter.h"
#include "error_message.h"

namespace anvil {
namespace {

using test::error_of;

std::string peft_error(const std::string& text) {
  return error_of([&] { parse_peft_adapter_config(text, "a/adapter_config.json"); });
}

TEST(PeftConfigNumbers, ParsesAValidConfig) {
  const PeftAdapterInfo info = parse_peft_adapter_config(
      R"({"r": 4, "lora_alpha": 8, "lora_dropout": 0.1, "target_modules": ["v_proj", "q_proj"]})",
      "a/adapter_config.json");
  EXPECT_EQ(info.lora.r, 4);
  EXPECT_FLOAT_EQ(info.lora.alpha, 8.0f);
  EXPECT_EQ(info.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
}

TEST(PeftConfigNumbers, OutOfRangeValuesAreNamedAsWritten) {
  EXPECT_EQ(peft_error(R"({"r": 4294967304})"),
            "[peft] a/adapter_config.json: 'r' is out of range: 4294967304");
  EXPECT_EQ(peft_error(R"({"r": 2.5})"),
            "[peft] a/adapter_config.json: 'r' must be an integer, got 2.5");
  EXPECT_EQ(peft_error(R"({"lora_alpha": 1e300})"),
            "[peft] a/adapter_config.json: 'lora_alpha' is out of range: 1e+300");
  EXPECT_EQ(peft_error(R"({"peft_type": 7})"),
            "[peft] a/adapter_config.json: 'peft_type' must be a string, got 7");
  EXPECT_EQ(peft_error(R"({"target_modules": [1]})"),
            "[peft] a/adapter_config.json: 'target_modules' must be a list of names, got 1");
}

TEST(HfConfigNumbers, OutOfRangeValuesAreNamedAsWritten) {
  const std::string config =
      R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
          "intermediate_size": 176, "num_attention_heads": 4, "num_key_value_heads": 2,
          "num_hidden_layers": 18446744073709551615, "vocab_size": 256})";
  EXPECT_EQ(error_of([&] { parse_hf_config(config, "m/config.json"); }),
            "[hf-config] m/config.json: 'num_hidden_layers' is out of range: "
            "18446744073709551615");
}

}  // namespace
}  // namespace anvil
