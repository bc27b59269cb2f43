// `anvil convert --format anvil` of a Llama 3.1 model (llama3 rope scaling): the config.toml it
// writes describes the same model as the source's config.json, rope scaling included, so
// training from it starts from the source as it is (no context-extension note, which the
// trainer prints when [model] and model.init_from disagree on the positions).
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "model/hf_config.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::CommandResult;
using testing_support::run_anvil;
using testing_support::scratch_dir;

const fs::path kLlama31 = fs::path(ANVIL_TEST_DATA) / "eval" / "golden" / "llama31";

TEST(ConvertAnvilFormat, RopeScaledModelTrainsFromItsConfigToml) {
  const fs::path dir = scratch_dir("convert_rope");
  const fs::path anvil_dir = dir / "anvil";
  const CommandResult convert = run_anvil("convert --from '" + kLlama31.string() + "' --to '" +
                                          anvil_dir.string() + "' --format anvil");
  ASSERT_EQ(convert.exit_code, 0) << convert.output;

  TrainConfig config;
  apply_config_file(config, (anvil_dir / "config.toml").string());
  const LlamaConfig ours = llama_config_from(config.model);
  const LlamaConfig theirs = read_hf_config(kLlama31).llama;
  ASSERT_GT(theirs.rope_scaling_factor, 0.0f);
  EXPECT_EQ(ours.summary(), theirs.summary());
  EXPECT_EQ(ours.position_changes_from(theirs), "");
  EXPECT_EQ(ours.rope_scaling_factor, theirs.rope_scaling_factor);
  EXPECT_EQ(ours.rope_low_freq_factor, theirs.rope_low_freq_factor);
  EXPECT_EQ(ours.rope_high_freq_factor, theirs.rope_high_freq_factor);
  EXPECT_EQ(ours.rope_original_max_position, theirs.rope_original_max_position);
  EXPECT_EQ(ours.rope_theta, theirs.rope_theta);
  EXPECT_EQ(ours.norm_eps, theirs.norm_eps);

  const CommandResult train = run_anvil(
      "train --threads 1 --config '" + (anvil_dir / "config.toml").string() + "' --run-dir '" +
      (dir / "run").string() + "' --data.synthetic=true --training.steps=1 "
      "--training.batch_size=1 --training.seq_len=16 --training.eval_every=0 "
      "--training.eval_steps=0 --optimizer.warmup_steps=1");
  EXPECT_EQ(train.exit_code, 0) << train.output;
  EXPECT_EQ(train.output.find("context extension"), std::string::npos) << train.output;
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anvil
