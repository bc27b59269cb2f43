// metrics.jsonl: exact line format (round-trip numbers, time fields last) and the resume cut;
// the records as named scalars, and the TensorBoard sink writing exactly those.
#include "observe/metrics.h"

#include <gtest/gtest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "io/file_util.h"
#include "io/tensorboard_events.h"
#include "observe/progress.h"
#include "observe/tensorboard_sink.h"

namespace anvil {
namespace {

TEST(MetricsTest, LinesUseRoundTripNumbersWithTimeFieldsLast) {
  const TrainStepRecord record{7, 0.1 + 0.2, 3e-4, 1.5, 1024, 12345.678, 2.5};
  EXPECT_EQ(format_metrics_line(record),
            "{\"type\":\"train\",\"step\":7,\"loss\":0.30000000000000004,\"lr\":0.0003,"
            "\"grad_norm\":1.5,\"tokens\":1024,\"skipped_steps\":0,\"tokens_per_s\":12345.7,"
            "\"host_waits\":0,\"readback_bytes\":0,\"elapsed_s\":2.500}");
  const EvalRecord eval{10, 2.0, 7.38905609893065, 4096, 1.25};
  EXPECT_EQ(format_metrics_line(eval),
            "{\"type\":\"eval\",\"step\":10,\"loss\":2,\"ppl\":7.38905609893065,\"tokens\":4096,"
            "\"elapsed_s\":1.250}");
  // Benchmark scores follow the loss; without a validation split only they are written.
  EvalRecord tasks{12, 0, 0, 0, 3.5, false, {{"mmlu_acc", 0.25}, {"hellaswag_acc_norm", 0.5}}};
  EXPECT_EQ(format_metrics_line(tasks),
            "{\"type\":\"eval\",\"step\":12,\"mmlu_acc\":0.25,\"hellaswag_acc_norm\":0.5,"
            "\"elapsed_s\":3.500}");
}

TEST(MetricsTest, ResumeCutsRecordsPastTheCheckpointAndATornLine) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("anvil_metrics_test_" + std::to_string(getpid()) + ".jsonl");
  {
    MetricsWriter writer(path, -1);
    for (int64_t step = 1; step <= 4; ++step)
      writer.write(TrainStepRecord{step, 1.0, 0.1, 1.0, step, 0, 0});
    writer.write(EvalRecord{4, 1.0, 2.7, 10, 0});
  }
  {
    std::ofstream torn(path, std::ios::app);
    torn << "{\"type\":\"train\",\"step\":5,\"lo";
  }
  {
    MetricsWriter resumed(path, 4);
    resumed.write(TrainStepRecord{5, 2.0, 0.1, 1.0, 5, 0, 0});
  }
  const std::string text = read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 6);
  EXPECT_EQ(text.find("\"lo\n"), std::string::npos);
  EXPECT_NE(text.find("\"step\":5,\"loss\":2,"), std::string::npos);
  { MetricsWriter cut(path, 2); }
  const std::string after_cut = read_file(path);
  EXPECT_EQ(std::count(after_cut.begin(), after_cut.end(), '\n'), 2);
  { MetricsWriter fresh(path, -1); }
  EXPECT_EQ(read_file(path), "");
  std::filesystem::remove(path);
}

TEST(MetricsTest, AResumeAtAWorldChangeRewritesItsRecord) {
  EXPECT_EQ(format_metrics_line(WorldChangeRecord{6, 2, 4}),
            "{\"type\":\"world\",\"step\":6,\"world\":2,\"previous\":4}");
  const auto path = std::filesystem::temp_directory_path() /
                    ("anvil_metrics_world_test_" + std::to_string(getpid()) + ".jsonl");
  {
    MetricsWriter writer(path, -1);
    writer.write(TrainStepRecord{1, 1.0, 0.1, 1.0, 1, 0, 0});
    writer.write(TrainStepRecord{2, 1.0, 0.1, 1.0, 2, 0, 0});
    writer.write(WorldChangeRecord{2, 2, 4});
    writer.write(TrainStepRecord{3, 1.0, 0.1, 1.0, 3, 0, 0});
    writer.write(WorldChangeRecord{3, 4, 2});
  }
  // A resume from step 3 writes its own world record (or none) again: the old one goes.
  { MetricsWriter resumed(path, 3); }
  const std::string text = read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 4);
  EXPECT_NE(text.find("\"step\":2,\"world\":2"), std::string::npos);
  EXPECT_EQ(text.find("\"step\":3,\"world\""), std::string::npos);
  std::filesystem::remove(path);
}

TEST(MetricsTest, NonFiniteValuesAreWrittenAsNull) {
  TrainStepRecord skipped{3, std::nan(""), 1e-3, INFINITY, 96, 10.0, 1.0};
  skipped.skipped_steps = 1;
  const std::string line = format_metrics_line(skipped);
  EXPECT_NE(line.find("\"loss\":null,\"lr\":0.001,\"grad_norm\":null,\"tokens\":96,"
                      "\"skipped_steps\":1,"),
            std::string::npos)
      << line;
  EXPECT_FALSE(nlohmann::json::parse(line).is_discarded());
  const std::string eval = format_metrics_line(EvalRecord{4, 800.0, INFINITY, 10, 0});
  EXPECT_NE(eval.find("\"ppl\":null"), std::string::npos) << eval;
}

// RLIMIT_FSIZE with SIGXFSZ ignored makes write(2) fail with EFBIG: a real OS write failure
// without a full disk. The line that does not fit must not stay behind half written.
TEST(MetricsTest, AFailedAppendNamesTheFileAndLeavesOnlyWholeLines) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("anvil_metrics_full_" + std::to_string(getpid()) + ".jsonl");
  MetricsWriter writer(path, -1);
  writer.write(TrainStepRecord{1, 1.0, 0.1, 1.0, 1, 0, 0});
  const uintmax_t whole = std::filesystem::file_size(path);
  std::string message;
  {
    struct rlimit saved;
    ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
    const auto previous = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limited = saved;
    limited.rlim_cur = whole + 20;  // room for part of the next line only
    ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
    try {
      writer.write(TrainStepRecord{2, 1.0, 0.1, 1.0, 2, 0, 0});
    } catch (const Error& e) {
      message = e.what();
    }
    setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, previous);
  }
  EXPECT_NE(message.find("[metrics] cannot write " + path.string() + ": File too large"),
            std::string::npos)
      << message;
  EXPECT_EQ(std::filesystem::file_size(path), whole);
  writer.write(TrainStepRecord{2, 1.0, 0.1, 1.0, 2, 0, 0});  // space again: appends cleanly
  const std::string text = read_file(path);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 2);
  EXPECT_NE(text.find("\"step\":2,"), std::string::npos);
  std::filesystem::remove(path);
}

TEST(MetricsTest, MfuIsAWallClockFieldWrittenWhenKnown) {
  TrainStepRecord record{3, 2.0, 1e-3, 0.5, 96, 1000.0, 1.5};
  EXPECT_EQ(format_metrics_line(record).find("mfu"), std::string::npos);
  record.mfu = 0.123456;
  EXPECT_NE(format_metrics_line(record).find(",\"tokens_per_s\":1000.0,\"mfu\":0.1235,"
                                             "\"host_waits\":0,\"readback_bytes\":0,"
                                             "\"elapsed_s\":1.500}"),
            std::string::npos)
      << format_metrics_line(record);
}

TEST(MetricsTest, MemoryFieldsComeBeforeTheWallClockFieldsWhenMeasured) {
  TrainStepRecord record{3, 2.0, 1e-3, 0.5, 96, 1000.0, 1.5};
  EXPECT_EQ(format_metrics_line(record).find("mem_"), std::string::npos);
  record.mem_bytes = 3000;
  record.mem_peak_bytes = 5000;
  record.mem_peak = {0, 1000, 1000, 2000, 900, 100, 7};
  const std::string line = format_metrics_line(record);
  EXPECT_NE(line.find(",\"skipped_steps\":0,\"mem_bytes\":3000,\"mem_peak_bytes\":5000,"
                      "\"mem_peak\":{\"frozen_weights\":0,\"trainable_weights\":1000,"
                      "\"gradients\":1000,\"optimizer_state\":2000,\"activations\":900,"
                      "\"communication\":100,\"workspace\":7},\"tokens_per_s\":1000.0,"),
            std::string::npos)
      << line;
  std::vector<std::string> tags;
  for (const MetricScalar& scalar : metric_scalars(nlohmann::ordered_json::parse(line)))
    tags.push_back(scalar.tag);
  const std::vector<std::string> memory(tags.begin() + 5, tags.begin() + 14);
  EXPECT_EQ(memory, (std::vector<std::string>{
                        "train/mem_bytes", "train/mem_peak_bytes", "mem_peak/frozen_weights",
                        "mem_peak/trainable_weights", "mem_peak/gradients",
                        "mem_peak/optimizer_state", "mem_peak/activations",
                        "mem_peak/communication", "mem_peak/workspace"}));
}

TEST(MetricsTest, MixtureSourcesAreObjectsKeyedByPath) {
  TrainStepRecord record{3, 2.0, 1e-3, 0.5, 96, 1000.0, 1.5};
  record.source_tokens = {{"data/web", 128}, {"odd \"dir\"", 32}};
  const std::string line = format_metrics_line(record);
  EXPECT_NE(line.find(",\"skipped_steps\":0,\"source_tokens\":{\"data/web\":128,"
                      "\"odd \\\"dir\\\"\":32},\"tokens_per_s\":"),
            std::string::npos)
      << line;
  std::vector<std::string> tags;
  for (const MetricScalar& scalar : metric_scalars(nlohmann::ordered_json::parse(line)))
    tags.push_back(scalar.tag);
  EXPECT_EQ(tags[5], "source_tokens/data/web");
  EXPECT_EQ(tags[6], "source_tokens/odd \"dir\"");
  EvalRecord eval{10, 2.0, 7.5, 4096, 1.25};
  eval.source_val_loss = {{"data/web", 2.5}, {"data/code", NAN}};
  EXPECT_EQ(format_metrics_line(eval),
            "{\"type\":\"eval\",\"step\":10,\"loss\":2,\"ppl\":7.5,\"tokens\":4096,"
            "\"source_val_loss\":{\"data/web\":2.5,\"data/code\":null},\"elapsed_s\":1.250}");
  // One dataset: no source fields at all.
  EXPECT_EQ(format_metrics_line(TrainStepRecord{3, 2.0, 1e-3, 0.5, 96, 1000.0, 1.5})
                .find("source_"),
            std::string::npos);
}

TEST(MetricsTest, ScalarsNameEveryNumberOfARecord) {
  const auto record = nlohmann::ordered_json::parse(
      R"({"type":"train","step":4,"loss":2.5,"lr":null,"note":"x","flag":true,)"
      R"("memory":{"activations":1024,"optimizer":{"m":8}},"tokens_per_s":10.5})");
  const std::vector<MetricScalar> scalars = metric_scalars(record);
  ASSERT_EQ(scalars.size(), 4u);
  EXPECT_EQ(scalars[0].tag, "train/loss");
  EXPECT_EQ(scalars[0].value, 2.5);
  EXPECT_EQ(scalars[1].tag, "memory/activations");
  EXPECT_EQ(scalars[1].value, 1024.0);
  EXPECT_EQ(scalars[2].tag, "memory/optimizer/m");
  EXPECT_EQ(scalars[3].tag, "train/tokens_per_s");
  const auto eval = nlohmann::ordered_json::parse(format_metrics_line(
      EvalRecord{10, 2.0, 7.5, 4096, 1.25, true, {{"mmlu_acc", 0.25}}}));
  std::vector<std::string> tags;
  for (const MetricScalar& scalar : metric_scalars(eval)) tags.push_back(scalar.tag);
  EXPECT_EQ(tags, (std::vector<std::string>{"eval/loss", "eval/ppl", "eval/tokens",
                                            "eval/mmlu_acc", "eval/elapsed_s"}));
}

// Every record a sink receives becomes one event of exactly its scalars, as floats.
TEST(MetricsTest, TensorBoardSinkWritesEachRecordsScalars) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("anvil_tensorboard_sink_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  TrainStepRecord step{1, 0.1 + 0.2, 3e-4, 1.5, 1024, 12345.678, 2.5};
  step.mfu = 0.25;
  const EvalRecord eval{1, 2.0, 7.38905609893065, 4096, 1.25, true, {{"mmlu_acc", 0.3}}};
  {
    MetricsSinks sinks;
    sinks.add(std::make_unique<MetricsWriter>(dir / "metrics.jsonl", -1));
    sinks.add(std::make_unique<TensorBoardSink>(dir, -1));
    sinks.write(step);
    sinks.write(eval);
  }
  const std::vector<std::filesystem::path> files = event_files(dir);
  ASSERT_EQ(files.size(), 1u);
  const std::vector<TensorBoardEvent> events = read_event_file(files[0]);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[0].file_version, kTensorBoardFileVersion);
  std::istringstream lines(read_file(dir / "metrics.jsonl"));
  size_t index = 1;
  for (std::string line; std::getline(lines, line); ++index) {
    const auto record = nlohmann::ordered_json::parse(line);
    const std::vector<MetricScalar> expected = metric_scalars(record);
    ASSERT_LT(index, events.size());
    EXPECT_EQ(events[index].step, record["step"].get<int64_t>());
    ASSERT_EQ(events[index].scalars.size(), expected.size()) << line;
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(events[index].scalars[i].tag, expected[i].tag);
      EXPECT_EQ(events[index].scalars[i].value, static_cast<float>(expected[i].value));
    }
  }
  EXPECT_EQ(index, events.size());
  std::filesystem::remove_all(dir);
}

TEST(ProgressTest, DurationsAndRates) {
  EXPECT_EQ(format_duration(5), "5s");
  EXPECT_EQ(format_duration(125), "2m05s");
  EXPECT_EQ(format_duration(3 * 3600 + 4 * 60), "3h04m");
  EXPECT_EQ(format_rate(950), "950");
  EXPECT_EQ(format_rate(12345), "12.3k");
  EXPECT_EQ(format_rate(2.5e6), "2.50M");
  EXPECT_GT(peak_rss_mb(), 0.0);
}

}  // namespace
}  // namespace anvil
