// Configuration: the pinned key surface, TOML loading, overrides, validation messages that
// name the nearest valid key, and the resolved config.toml round trip.
#include "train/config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <sstream>

#include "core/error.h"
#include "train/model_setup.h"
#include "observe/profiler.h"

namespace anvil {
namespace {

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ConfigTest, KeySurfaceIsPinned) {
  // Changing this list is deliberate: update docs/training.md in the same change.
  const std::vector<std::string> expected = {"model.dim",
                                             "model.n_layers",
                                             "model.n_heads",
                                             "model.n_kv_heads",
                                             "model.head_dim",
                                             "model.ffn_dim",
                                             "model.vocab_size",
                                             "model.max_seq_len",
                                             "model.rope_theta",
                                             "model.rope_scaling_factor",
                                             "model.rope_low_freq_factor",
                                             "model.rope_high_freq_factor",
                                             "model.rope_original_max_position",
                                             "model.norm_eps",
                                             "model.tie_embeddings",
                                             "model.attention_bias",
                                             "model.init_from",
                                             "data.path",
                                             "data.sources",
                                             "data.tokenizer",
                                             "data.synthetic",
                                             "data.val_split",
                                             "training.steps",
                                             "training.batch_size",
                                             "training.seq_len",
                                             "training.grad_accum",
                                             "training.dtype",
                                             "training.activation_checkpointing",
                                             "training.doc_mask",
                                             "training.seed",
                                             "training.eval_every",
                                             "training.eval_steps",
                                             "training.skip_nonfinite",
                                             "training.max_skipped_steps",
                                             "training.loss_scale",
                                             "training.loss_scale_init",
                                             "training.loss_scale_growth_interval",
                                             "attention.pattern",
                                             "attention.segment",
                                             "attention.stride",
                                             "attention.window",
                                             "attention.sinks",
                                             "attention.dense_every",
                                             "optimizer.lr",
                                             "optimizer.min_lr",
                                             "optimizer.schedule",
                                             "optimizer.warmup_steps",
                                             "optimizer.weight_decay",
                                             "optimizer.beta1",
                                             "optimizer.beta2",
                                             "optimizer.eps",
                                             "optimizer.grad_clip",
                                             "optimizer.decay_embeddings",
                                             "optimizer.wsd_decay_fraction",
                                             "parallel.dp",
                                             "parallel.fsdp",
                                             "parallel.tp",
                                             "parallel.cp",
                                             "parallel.sequence_parallel",
                                             "parallel.zero_stage",
                                             "parallel.offload",
                                             "parallel.offload_params",
                                             "parallel.prefetch",
                                             "parallel.reshard_after_forward",
                                             "parallel.overlap",
                                             "parallel.collective_timeout_s",
                                             "parallel.reduce",
                                             "parallel.reduce_dtype",
                                             "checkpoint.every",
                                             "checkpoint.keep",
                                             "checkpoint.on_error",
                                             "lora.r",
                                             "lora.alpha",
                                             "lora.dropout",
                                             "lora.targets",
                                             "lora.init_from",
                                             "lora.base_dtype",
                                             "eval.batch_size",
                                             "eval.tasks",
                                             "eval.task_data",
                                             "eval.task_shots",
                                             "eval.task_limit",
                                             "logging.every",
                                             "logging.json",
                                             "logging.tensorboard",
                                             "logging.peak_tflops",
                                             "profile.steps",
                                             "preflight.mode",
                                             "preflight.margin"};
  std::vector<std::string> actual;
  for (const ConfigField& field : config_fields()) actual.push_back(field.full_name());
  EXPECT_EQ(actual, expected);
}

TEST(ConfigTest, TomlSetsTypedValues) {
  TrainConfig config;
  apply_config_toml(config,
                    "[model]\ndim = 64\nrope_theta = 500000\n"
                    "[training]\nsteps = 7\ndtype = \"bf16\"\n"
                    "[optimizer]\nlr = 1e-3\n[lora]\ntargets = [\"q_proj\"]\n"
                    "[data]\nsynthetic = true\n",
                    "test.toml");
  EXPECT_EQ(config.model.dim, 64);
  EXPECT_EQ(config.model.rope_theta, 500000.0);
  EXPECT_EQ(config.training.steps, 7);
  EXPECT_EQ(config.training.dtype, "bf16");
  EXPECT_EQ(config.optimizer.lr, 1e-3);
  EXPECT_EQ(config.lora.targets, std::vector<std::string>{"q_proj"});
  EXPECT_TRUE(config.data.synthetic);
}

TEST(ConfigTest, UnknownKeyNamesNearestValidKey) {
  TrainConfig config;
  EXPECT_EQ(error_of([&] { apply_config_override(config, "training.lr", "1"); }),
            "[config] --unknown key 'training.lr' (did you mean 'optimizer.lr'?)");
  const std::string in_file =
      error_of([&] { apply_config_toml(config, "[training]\nstpes = 3\n", "run.toml"); });
  EXPECT_EQ(in_file,
            "[config] run.toml: unknown key 'training.stpes' (did you mean "
            "'training.steps'?)");
  EXPECT_NE(error_of([&] {
              apply_config_toml(config, "[optimiser]\nlr = 1\n", "a.toml");
            }).find("unknown section 'optimiser' (did you mean 'optimizer'?)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply_config_toml(config, "steps = 3\n", "a.toml");
            }).find("did you mean 'training.steps'?"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              apply_config_override(config, "optimizer.warmup", "3");
            }).find("did you mean 'optimizer.warmup_steps'?"),
            std::string::npos);
}

TEST(ConfigTest, WrongTypesAreClearErrors) {
  TrainConfig config;
  EXPECT_EQ(error_of([&] { apply_config_toml(config, "[training]\nsteps = \"x\"\n", "a.toml"); }),
            "[config] a.toml: training.steps must be an integer");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "training.steps", "1.5"); }),
            "[config] --training.steps must be an integer, got '1.5'");
  EXPECT_EQ(error_of([&] { apply_config_override(config, "data.synthetic", "yes"); }),
            "[config] --data.synthetic must be true or false, got 'yes'");
  EXPECT_NE(error_of([&] { apply_config_toml(config, "[model\n", "bad.toml"); }).find("bad.toml:1"),
            std::string::npos);
}

TEST(ConfigTest, OverridesAreExtractedInBothForms) {
  std::vector<std::string> args = {"--run-dir",      "r",    "--training.steps=5",
                                   "--optimizer.lr", "0.01", "--data.synthetic",
                                   "--threads",      "2",    "--lora.targets=q_proj,v_proj"};
  const auto overrides = extract_config_overrides(args);
  EXPECT_EQ(args, (std::vector<std::string>{"--run-dir", "r", "--threads", "2"}));
  ASSERT_EQ(overrides.size(), 4u);
  TrainConfig config;
  for (const auto& o : overrides) apply_config_override(config, o.name, o.value);
  EXPECT_EQ(config.training.steps, 5);
  EXPECT_EQ(config.optimizer.lr, 0.01);
  EXPECT_TRUE(config.data.synthetic);
  EXPECT_EQ(config.lora.targets, (std::vector<std::string>{"q_proj", "v_proj"}));
}

TEST(ConfigTest, ValidationNamesTheKey) {
  TrainConfig config;
  config.training.seq_len = 512;
  config.model.max_seq_len = 256;
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] training.seq_len (512) exceeds model.max_seq_len (256)");
  config = TrainConfig{};
  config.model.n_kv_heads = 3;
  EXPECT_NE(error_of([&] { validate_config(config); }).find("model.n_kv_heads"), std::string::npos);
  config = TrainConfig{};
  config.optimizer.schedule = "cosin";
  EXPECT_NE(error_of([&] { validate_config(config); }).find("did you mean 'cosine'?"),
            std::string::npos);
  config = TrainConfig{};
  apply_config_override(config, "parallel.collective_timeout_s", "-1");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.collective_timeout_s must be >= 0 seconds (0 disables the hang "
            "watchdog), got -1");
  apply_config_override(config, "parallel.collective_timeout_s", "0");
  EXPECT_EQ(error_of([&] { validate_config(config); }), "");
  apply_config_override(config, "parallel.prefetch", "0");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.prefetch must be 1..64 groups gathered ahead, got 0");
  apply_config_override(config, "parallel.prefetch", "3");
  EXPECT_EQ(error_of([&] { validate_config(config); }), "");
  apply_config_override(config, "parallel.reshard_after_forward", "false");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.reshard_after_forward = false needs parallel.zero_stage = 3 "
            "(only stage 3 gathers weights), got stage 0");
  apply_config_override(config, "parallel.zero_stage", "3");
  EXPECT_EQ(error_of([&] { validate_config(config); }), "");
  EXPECT_FALSE(config.parallel.reshard_after_forward);
  EXPECT_EQ(error_of([&] { validate_config(TrainConfig{}); }), "");
}

TEST(ConfigTest, ReduceModeAndDtypeAreCheckedAndReachTheParallelSettings) {
  TrainConfig config;
  EXPECT_EQ(config.parallel.reduce_mode(), ReduceMode::exact);
  EXPECT_EQ(config.parallel.reduce_type(), DType::f32);
  apply_config_override(config, "parallel.reduce", "quick");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.reduce must be exact or fast, got 'quick'");
  apply_config_override(config, "parallel.reduce", "exact");
  apply_config_override(config, "parallel.reduce_dtype", "f16");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.reduce_dtype must be f32 or bf16, got 'f16'");
  apply_config_override(config, "parallel.reduce_dtype", "bf16");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] parallel.reduce_dtype = bf16 needs parallel.reduce = fast (exact "
            "reductions are f32 ordered sums)");
  apply_config_override(config, "parallel.reduce", "fast");
  EXPECT_EQ(error_of([&] { validate_config(config); }), "");
  EXPECT_EQ(config.parallel.reduce_mode(), ReduceMode::fast);
  EXPECT_EQ(config.parallel.reduce_type(), DType::bf16);
}

TEST(ConfigTest, DataSourcesParseFromTomlAndTheCommandLine) {
  TrainConfig config;
  apply_config_toml(config,
                    "[data]\nsources = [{ path = \"data/web\", weight = 0.7 }, "
                    "{ path = \"data/code\", weight = 3 }]\n",
                    "mix.toml");
  EXPECT_EQ(config.data.sources,
            (std::vector<DataSourceSpec>{{"data/web", 0.7}, {"data/code", 3.0}}));
  EXPECT_EQ(error_of([&] { validate_config(config); }), "");
  TrainConfig cli;
  std::vector<std::string> args = {
      "--data.sources=[{ path = \"a\", weight = 0.8 }, { path = \"b\", weight = 0.2 }]"};
  for (const auto& o : extract_config_overrides(args)) apply_config_override(cli, o.name, o.value);
  EXPECT_EQ(cli.data.sources, (std::vector<DataSourceSpec>{{"a", 0.8}, {"b", 0.2}}));
  // The resolved config.toml writes the mixture back exactly.
  cli.data.sources[0].weight = 0.1 + 0.2;
  TrainConfig back;
  apply_config_toml(back, config_to_toml(cli), "resolved.toml");
  EXPECT_EQ(back.data.sources, cli.data.sources);
  EXPECT_NE(config_to_toml(cli).find(
                "sources = [{ path = \"a\", weight = 0.30000000000000004 }, { path = \"b\", "
                "weight = 0.2 }]"),
            std::string::npos);
}

TEST(ConfigTest, BadDataSourcesAreClearErrors) {
  const std::string shape = "must be a list of { path = \"dir\", weight = number } tables";
  TrainConfig config;
  EXPECT_EQ(error_of([&] { apply_config_override(config, "data.sources", "[{ path = \"a\" }]"); }),
            "[config] --data.sources " + shape + ", got '[{ path = \"a\" }]'");
  EXPECT_EQ(error_of([&] {
              apply_config_toml(config, "[data]\nsources = [{ path = \"a\", weight = \"x\" }]\n",
                                "m.toml");
            }),
            "[config] m.toml: data.sources " + shape);
  EXPECT_EQ(error_of([&] {
              apply_config_toml(config,
                                "[data]\nsources = [{ path = \"a\", weight = 1, extra = 2 }]\n",
                                "m.toml");
            }),
            "[config] m.toml: data.sources " + shape);
  apply_config_override(config, "data.sources", "[{ path = 'web', weight = 1 }, { path = 'code', weight = 0 }]");
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] data.sources[1] ('code') has weight 0; weights must be positive numbers");
  apply_config_override(config, "data.sources", "[{ path = 'web', weight = 1 }, { path = 'web', weight = 2 }]");
  EXPECT_NE(error_of([&] { validate_config(config); }).find("names 'web' twice"),
            std::string::npos);
  apply_config_override(config, "data.sources", "[{ path = 'web', weight = 1 }]");
  config.data.path = "data/other";
  EXPECT_EQ(error_of([&] { validate_config(config); }),
            "[config] data.path ('data/other') and data.sources are both set; a mixture names "
            "every dataset in data.sources");
  config.data.path = TrainConfig{}.data.path;
  config.data.synthetic = true;
  EXPECT_NE(error_of([&] { validate_config(config); }).find("data.sources and data.synthetic"),
            std::string::npos);
}

// profile.steps is empty or "A:B" with 1 <= A <= B <= training.steps.
TEST(ConfigTest, ProfileStepsAreValidated) {
  EXPECT_FALSE(parse_profile_steps("", 10).enabled());
  const ProfileWindow window = parse_profile_steps("3:5", 10);
  EXPECT_EQ(window.first, 3);
  EXPECT_EQ(window.last, 5);
  EXPECT_FALSE(window.contains(2));
  EXPECT_TRUE(window.contains(3) && window.contains(5));
  EXPECT_FALSE(window.contains(6));
  EXPECT_EQ(parse_profile_steps("10:10", 10).first, 10);
  TrainConfig config;
  config.training.steps = 6;
  const auto error_for = [&](const char* steps) {
    config.profile.steps = steps;
    return error_of([&] { validate_config(config); });
  };
  EXPECT_EQ(error_for("3:5"), "");
  EXPECT_EQ(error_for("4"),
            "[config] profile.steps must be \"A:B\" (trace steps A to B, e.g. \"3:5\") or "
            "empty, got \"4\"");
  EXPECT_NE(error_for("3:x").find("must be \"A:B\""), std::string::npos);
  EXPECT_NE(error_for(" 3:5").find("must be \"A:B\""), std::string::npos);
  EXPECT_EQ(error_for("0:2"), "[config] profile.steps = \"0:2\": steps count from 1");
  EXPECT_EQ(error_for("5:3"),
            "[config] profile.steps = \"5:3\": the first step 5 is after the last step 3");
  EXPECT_EQ(error_for("5:7"),
            "[config] profile.steps = \"5:7\": step 7 is past training.steps = 6");
}

// Each inconsistent [attention] setting is one error naming the key and the fix; a consistent
// sparse setup validates and maps onto the model's schedule.
TEST(ConfigTest, AttentionMasksAreValidated) {
  auto error_with = [](std::initializer_list<std::pair<const char*, const char*>> overrides) {
    TrainConfig config;
    config.training.seq_len = 256;
    config.model.max_seq_len = 256;
    for (const auto& [name, value] : overrides) apply_config_override(config, name, value);
    return error_of([&] { validate_config(config); });
  };
  EXPECT_NE(error_with({{"attention.pattern", "line"}}).find("did you mean 'lines'?"),
            std::string::npos);
  EXPECT_EQ(error_with({{"attention.pattern", "lines"}, {"attention.segment", "48"}}),
            "[config] attention.segment (48) must be a multiple of the attention tile (64) so "
            "the kernels skip hidden tiles whole");
  EXPECT_EQ(error_with({{"attention.pattern", "lines"}}),
            "[config] attention.segment must be > 0, got 0");
  EXPECT_NE(error_with({{"attention.pattern", "lines"}, {"attention.segment", "256"}})
                .find("one segment holding the whole context is dense attention"),
            std::string::npos);
  EXPECT_EQ(error_with({{"attention.window", "300"}}),
            "[config] attention.window (300) is larger than the context training.seq_len (256); "
            "such a window hides nothing (use 0 for no window)");
  EXPECT_NE(error_with({{"attention.pattern", "strided"}, {"attention.segment", "64"}})
                .find("attention.stride must be > 0"),
            std::string::npos);
  EXPECT_NE(error_with({{"attention.pattern", "lines"}, {"attention.segment", "64"},
                        {"attention.stride", "2"}})
                .find("attention.stride belongs to the strided pattern"),
            std::string::npos);
  EXPECT_NE(error_with({{"attention.segment", "64"}}).find("attention.pattern is dense"),
            std::string::npos);
  EXPECT_NE(error_with({{"attention.dense_every", "4"}}).find("no layer is sparse"),
            std::string::npos);
  EXPECT_NE(error_with({{"attention.sinks", "4"}}).find("already visible"), std::string::npos);
  EXPECT_EQ(error_with({{"attention.pattern", "strided"}, {"attention.segment", "64"},
                        {"attention.stride", "2"}, {"attention.sinks", "4"},
                        {"attention.dense_every", "3"}}),
            "");
  TrainConfig config;
  apply_config_override(config, "attention.pattern", "lines");
  apply_config_override(config, "attention.segment", "64");
  apply_config_override(config, "attention.dense_every", "2");
  const AttentionSchedule schedule = attention_schedule_from(config.attention);
  AttentionParams layer0, layer1;
  schedule.apply(0, layer0);
  schedule.apply(1, layer1);
  EXPECT_EQ(layer0.pattern, SparsePattern::lines);
  EXPECT_EQ(layer0.segment, 64);
  EXPECT_EQ(layer1.pattern, SparsePattern::dense);  // every second layer is dense
}

TEST(ConfigTest, ResolvedTomlRoundTripsExactly) {
  TrainConfig config;
  config.optimizer.lr = 0.1 + 0.2;  // not exactly representable in short decimal
  config.model.rope_theta = 10000.0;
  config.model.init_from = "dir with \"quotes\"\\";
  config.lora.targets = {"a", "b"};
  const std::string text = config_to_toml(config);
  TrainConfig back;
  back.model.dim = 1;
  apply_config_toml(back, text, "resolved.toml");
  EXPECT_EQ(config_to_toml(back), text);
  EXPECT_EQ(back.optimizer.lr, config.optimizer.lr);
  EXPECT_EQ(back.model.init_from, config.model.init_from);
}

// Returns the non-blank, non-comment lines of TOML text.
std::vector<std::string> meaningful_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') lines.push_back(line);
  }
  return lines;
}

TEST(ConfigTest, TinyPresetFileIsTheDefaults) {
  // `anvil train` with no arguments trains the defaults; configs/tiny.toml spells out every
  // key of them, so it doubles as the reference of the whole configuration.
  std::ifstream in(std::string(ANVIL_TEST_DATA) + "/../configs/tiny.toml");
  ASSERT_TRUE(in.good());
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_EQ(meaningful_lines(text.str()), meaningful_lines(config_to_toml(TrainConfig{})));
}

TEST(ConfigTest, EveryPresetFileIsValid) {
  for (const char* name :
       {"tiny", "30M", "125M", "1B", "llama2-7b", "llama3-8b", "llama3.1-405b"}) {
    TrainConfig config;
    apply_config_file(config, std::string(ANVIL_TEST_DATA) + "/../configs/" + name + ".toml");
    EXPECT_NO_THROW(validate_config(config)) << name;
  }
}

}  // namespace
}  // namespace anvil
