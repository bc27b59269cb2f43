// `--profile.steps=A:B` end to end: one process and a 2-rank ZeRO-3 job write a merged trace
// that is trace-event JSON (every event has name, ph, ts, pid, tid; spans have dur >= 0) with
// one process per rank; spans of one thread nest; every span lies inside steps A..B; the model's
// groups, the optimizer, data loading, evaluation, checkpoints and copies have their spans;
// each collective's bytes equal the formula of the shard plan and add up to the per-axis byte
// counters; a "memory" counter holds each rank's bytes by category at the window's start and
// after each step (one process: what metrics.jsonl measured at that step's end); the printed
// and JSON summaries equal what the trace's events define. Bad values
// of profile.steps are one error line and leave no run folder.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/memory_category.h"
#include "model/llama_parameters.h"
#include "model/parameters.h"
#include "train/config.h"
#include "train/model_setup.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::run_anvil;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

struct Span {
  std::string name;
  std::string category;
  int64_t begin = 0;  // ns since the window opened
  int64_t end = 0;
  int pid = 0;
  int tid = 0;
  nlohmann::json args;
};

// Timestamps are microseconds with nanosecond resolution; these are exact nanoseconds again.
int64_t ns(const nlohmann::json& microseconds) {
  return std::llround(microseconds.get<double>() * 1000.0);
}

nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

nlohmann::json last_line_json(const std::string& output) {
  std::istringstream lines(output);
  std::string line, last;
  while (std::getline(lines, line))
    if (!line.empty() && line.front() == '{') last = line;
  return nlohmann::json::parse(last);
}

// Checks the trace-event format and a process named "rank r" for each of `ranks` ranks;
// returns the spans.
std::vector<Span> check_format(const nlohmann::json& doc, int ranks) {
  std::vector<Span> spans;
  EXPECT_TRUE(doc.is_object() && doc["traceEvents"].is_array());
  std::map<int, std::string> process_names;
  for (const nlohmann::json& e : doc["traceEvents"]) {
    for (const char* key : {"name", "ph", "ts", "pid", "tid"}) {
      EXPECT_TRUE(e.contains(key)) << "event without " << key << ": " << e;
    }
    EXPECT_TRUE(e["name"].is_string() && e["ph"].is_string() && e["ts"].is_number() &&
                e["pid"].is_number_integer() && e["tid"].is_number_integer())
        << e;
    if (e["ph"] == "M" && e["name"] == "process_name") process_names[e["pid"]] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    EXPECT_TRUE(e["dur"].is_number() && e["dur"].get<double>() >= 0) << e;
    Span s;
    s.name = e["name"];
    s.category = e["cat"];
    s.begin = ns(e["ts"]);
    s.end = s.begin + ns(e["dur"]);
    s.pid = e["pid"];
    s.tid = e["tid"];
    s.args = e["args"];
    spans.push_back(std::move(s));
  }
  std::map<int, std::string> expected;
  for (int r = 0; r < ranks; ++r) expected[r] = "rank " + std::to_string(r);
  EXPECT_EQ(process_names, expected);
  return spans;
}

// Checks that the spans of each (pid, tid) nest: two spans are disjoint or one holds the other.
void expect_spans_nest(std::vector<Span> spans) {
  std::sort(spans.begin(), spans.end(), [](const Span& a, const Span& b) {
    if (a.pid != b.pid) return a.pid < b.pid;
    if (a.tid != b.tid) return a.tid < b.tid;
    if (a.begin != b.begin) return a.begin < b.begin;
    return a.end > b.end;
  });
  std::vector<const Span*> open;
  for (const Span& s : spans) {
    while (!open.empty() && (open.back()->pid != s.pid || open.back()->tid != s.tid ||
                             open.back()->end <= s.begin)) {
      open.pop_back();
    }
    if (!open.empty()) {
      EXPECT_LE(s.end, open.back()->end) << s.name << " [" << s.begin << ", " << s.end
                                         << ") partly overlaps " << open.back()->name << " ["
                                         << open.back()->begin << ", " << open.back()->end
                                         << ") on pid " << s.pid << " tid " << s.tid;
    }
    open.push_back(&s);
  }
}

int64_t measure_of_union(std::vector<std::pair<int64_t, int64_t>> intervals) {
  std::sort(intervals.begin(), intervals.end());
  int64_t total = 0, begin = 0, end = -1;
  for (const auto& [b, e] : intervals) {
    if (b > end) {
      if (end > begin) total += end - begin;
      begin = b;
      end = e;
    } else {
      end = std::max(end, e);
    }
  }
  if (end > begin) total += end - begin;
  return total;
}

// The summary's comm and exposed-comm time of one rank, by their definitions
// (docs/observability.md), from the trace file's spans; in nanoseconds.
std::pair<int64_t, int64_t> comm_and_exposed(const std::vector<Span>& spans, int pid) {
  std::vector<std::pair<int64_t, int64_t>> comm, exposed;
  for (const Span& s : spans) {
    if (s.pid != pid) continue;
    if (s.category == "comm" || s.category == "comm_async") comm.emplace_back(s.begin, s.end);
    if (s.category == "comm" || s.category == "comm_wait") exposed.emplace_back(s.begin, s.end);
  }
  return {measure_of_union(comm), measure_of_union(exposed)};
}

std::vector<const Span*> named(const std::vector<Span>& spans, const std::string& name, int pid) {
  std::vector<const Span*> found;
  for (const Span& s : spans)
    if (s.name == name && s.pid == pid) found.push_back(&s);
  return found;
}

// Checks that rank `pid`'s step spans are exactly steps first..last and that every other span
// lies inside one of them (nothing is recorded outside the window); returns the step spans.
std::vector<const Span*> check_window(const std::vector<Span>& spans, int pid, int first,
                                      int last) {
  std::vector<const Span*> steps = named(spans, "step", pid);
  std::sort(steps.begin(), steps.end(),
            [](const Span* a, const Span* b) { return a->begin < b->begin; });
  std::vector<int> numbers;
  for (const Span* s : steps) numbers.push_back(s->args["step"]);
  std::vector<int> expected;
  for (int step = first; step <= last; ++step) expected.push_back(step);
  EXPECT_EQ(numbers, expected) << "rank " << pid;
  for (const Span& s : spans) {
    if (s.pid != pid || s.name == "step") continue;
    const bool inside = std::any_of(steps.begin(), steps.end(), [&](const Span* step) {
      return step->begin <= s.begin && s.end <= step->end;
    });
    EXPECT_TRUE(inside) << s.name << " at " << s.begin << " lies outside steps " << first << "-"
                        << last << " on rank " << pid;
  }
  return steps;
}

// Checks the summary a run printed and put into its JSON line against the trace's spans.
void check_summary(const std::string& output, const std::vector<Span>& spans, int ranks) {
  const nlohmann::json summary = last_line_json(output)["trace"];
  ASSERT_TRUE(summary.is_array()) << output;
  ASSERT_EQ(summary.size(), static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    const nlohmann::json& s = summary[r];
    EXPECT_EQ(s["rank"], r);
    EXPECT_NE(output.find("trace rank " + std::to_string(r) + ": compute "), std::string::npos)
        << output;
    const auto [comm, exposed] = comm_and_exposed(spans, r);
    EXPECT_NEAR(s["comm_s"].get<double>(), static_cast<double>(comm) * 1e-9, 1e-12);
    EXPECT_NEAR(s["exposed_comm_s"].get<double>(), static_cast<double>(exposed) * 1e-9, 1e-12);
    EXPECT_GT(s["compute_s"].get<double>(), 0.0);
    EXPECT_LE(s["compute_s"].get<double>() + s["exposed_comm_s"].get<double>(),
              s["window_s"].get<double>());
    ASSERT_TRUE(s["overlap"].is_number()) << s;
    EXPECT_NEAR(s["overlap"].get<double>(),
                1.0 - static_cast<double>(exposed) / static_cast<double>(comm), 1e-9);
  }
}

// Checks that each step's collective bytes on every counted axis add up to the growth of the
// "comm bytes" counter over that step.
void check_bytes_match_counters(const nlohmann::json& doc, const std::vector<Span>& spans,
                                int pid, const std::vector<const Span*>& steps) {
  std::vector<std::pair<int64_t, nlohmann::json>> counters;
  for (const nlohmann::json& e : doc["traceEvents"])
    if (e["ph"] == "C" && e["name"] == "comm bytes" && e["pid"] == pid)
      counters.emplace_back(ns(e["ts"]), e["args"]);
  std::sort(counters.begin(), counters.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  ASSERT_EQ(counters.size(), steps.size() + 1) << "a counter at the start and after each step";
  for (size_t i = 0; i < steps.size(); ++i) {
    for (const char* axis : {"tp", "cp", "data", "dp", "fsdp"}) {
      int64_t traced = 0;
      for (const Span& s : spans) {
        if (s.pid != pid || (s.category != "comm" && s.category != "comm_async")) continue;
        if (s.args["axis"] != axis || s.begin < steps[i]->begin || s.end > steps[i]->end) continue;
        traced += s.args["bytes"].get<int64_t>();
      }
      const double counted = counters[i + 1].second[axis].get<double>() -
                             counters[i].second[axis].get<double>();
      EXPECT_EQ(static_cast<double>(traced), counted)
          << "axis " << axis << ", rank " << pid << ", step " << steps[i]->args["step"];
    }
  }
}

// Checks that rank `pid` recorded the "memory" counter at the window's start and after each
// step, every category named, and returns the total bytes of each after-step counter.
std::vector<double> memory_counter_totals(const nlohmann::json& doc, int pid, size_t steps) {
  std::vector<std::pair<int64_t, nlohmann::json>> counters;
  for (const nlohmann::json& e : doc["traceEvents"])
    if (e["ph"] == "C" && e["name"] == "memory" && e["pid"] == pid)
      counters.emplace_back(ns(e["ts"]), e["args"]);
  std::sort(counters.begin(), counters.end(),
            [](const auto& a, const auto& b) { return a.first < b.first; });
  EXPECT_EQ(counters.size(), steps + 1) << "a memory counter at the start and after each step";
  std::vector<double> totals;
  for (size_t i = 0; i < counters.size(); ++i) {
    double total = 0;
    for (const std::string_view name : kMemoryCategoryNames) {
      EXPECT_TRUE(counters[i].second.contains(std::string(name))) << name;
      total += counters[i].second.value(std::string(name), 0.0);
    }
    EXPECT_GT(counters[i].second["trainable_weights"].get<double>(), 0) << "rank " << pid;
    if (i > 0) totals.push_back(total);
  }
  return totals;
}

class TrainTraceTest : public ::testing::Test {
 protected:
  void SetUp() override { root = scratch_dir("trace"); }
  void TearDown() override { fs::remove_all(root); }
  fs::path root;
};

TEST_F(TrainTraceTest, OneProcessTracesItsWindow) {
  const fs::path run = root / "one";
  const auto result = run_anvil("train " + tiny_synthetic_args() +
                                " --training.steps=4 --profile.steps=2:3 --checkpoint.every=2 "
                                "--training.eval_every=2 --logging.json=true --run-dir " +
                                run.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(fs::exists(run / "trace" / "rank-00000.json"));
  EXPECT_NE(result.output.find("trace of steps 2-3 (1 rank): " + (run / "trace.json").string()),
            std::string::npos)
      << result.output;
  const nlohmann::json doc = read_json(run / "trace.json");
  const std::vector<Span> spans = check_format(doc, 1);
  expect_spans_nest(spans);
  const std::vector<const Span*> steps = check_window(spans, 0, 2, 3);
  EXPECT_EQ(doc["otherData"]["steps"], "2:3");

  // 2 steps x grad_accum 2 training passes over embedding, 2 layers and the head.
  for (const char* name : {"forward embedding", "forward layer 0", "forward layer 1",
                           "forward+backward head", "backward layer 1", "backward layer 0",
                           "backward embedding"}) {
    int train = 0;
    for (const Span* s : named(spans, name, 0)) {
      EXPECT_EQ(s->category, "compute");
      train += s->args["pass"] == "train";
    }
    EXPECT_EQ(train, 4) << name;
  }
  int eval_passes = 0;
  for (const Span* s : named(spans, "forward layer 1", 0)) eval_passes += s->args["pass"] == "eval";
  EXPECT_EQ(eval_passes, 2);  // eval_steps = 2 batches at step 2
  EXPECT_EQ(named(spans, "optimizer step", 0).size(), 2u);
  EXPECT_EQ(named(spans, "grad norm", 0).size(), 2u);
  EXPECT_EQ(named(spans, "evaluate", 0).size(), 1u);
  EXPECT_GE(named(spans, "data", 0).size(), 2u + 2u);  // each step's batch, each eval batch
  ASSERT_EQ(named(spans, "checkpoint save", 0).size(), 1u);
  EXPECT_EQ(named(spans, "checkpoint save", 0)[0]->args["step"], 2);
  EXPECT_EQ(named(spans, "checkpoint write", 0).size(), 1u);
  EXPECT_FALSE(named(spans, "copy to host", 0).empty());
  // A world of one exchanges no host values: the step's loss sums never reach a collective.
  EXPECT_TRUE(named(spans, "all_gather data", 0).empty());
  check_bytes_match_counters(doc, spans, 0, steps);
  // Steps 2 and 3 end holding what metrics.jsonl measured (evaluation and checkpoint keep
  // nothing they allocate).
  std::vector<double> measured;
  std::ifstream metrics(run / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    const int64_t step = record["step"].get<int64_t>();
    if (record["type"] == "train" && (step == 2 || step == 3))
      measured.push_back(record["mem_bytes"].get<double>());
  }
  EXPECT_EQ(memory_counter_totals(doc, 0, steps.size()), measured);
  check_summary(result.output, spans, 1);
}

// Returns the payload bytes of each parameter group's ZeRO all-gather and reduce-scatter in the
// tiny test model over `world` ranks: the group's elements padded to a multiple of world x the
// shard alignment (parallel/shard_plan.h), 4 bytes each (f32); empty groups have none.
std::vector<int64_t> group_payloads(int world) {
  std::vector<std::string> args;
  std::istringstream words(tiny_synthetic_args());
  for (std::string word; words >> word;) args.push_back(word);
  TrainConfig config;
  for (const ConfigOverride& o : extract_config_overrides(args))
    apply_config_override(config, o.name, o.value);
  const auto layout = make_llama_layout(llama_config_from(config.model), false);
  const int64_t unit = world * kParameterAlignment;
  std::vector<int64_t> payloads;
  for (int g = 0; g < layout->group_count(); ++g) {
    const int64_t n = layout->group_numel(g);
    if (n > 0) payloads.push_back((n + unit - 1) / unit * unit * 4);
  }
  return payloads;
}

TEST_F(TrainTraceTest, TwoRankZero3TraceHasATrackPerRankAndTheShardPlanBytes) {
  if (std::system("command -v mpirun > /dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  const fs::path run = root / "zero3";
  const auto result = run_anvil("launch --nproc 2 -- train " + tiny_synthetic_args() +
                                " --parallel.zero_stage=3 --training.steps=4 "
                                "--profile.steps=2:3 --training.eval_every=0 "
                                "--logging.json=true --run-dir " + run.string());
  ASSERT_EQ(result.exit_code, 0) << result.output;
  ASSERT_TRUE(fs::exists(run / "trace" / "rank-00000.json"));
  ASSERT_TRUE(fs::exists(run / "trace" / "rank-00001.json"));
  const nlohmann::json doc = read_json(run / "trace.json");
  const std::vector<Span> spans = check_format(doc, 2);
  expect_spans_nest(spans);

  std::vector<int64_t> payloads = group_payloads(2);
  std::sort(payloads.begin(), payloads.end());
  constexpr int kGradAccum = 2;  // tiny_synthetic_args
  for (int rank = 0; rank < 2; ++rank) {
    const std::vector<const Span*> steps = check_window(spans, rank, 2, 3);
    for (const Span* step : steps) {
      std::vector<int64_t> scattered, gathered;
      for (const Span& s : spans) {
        if (s.pid != rank || s.category != "comm_async") continue;
        if (s.begin < step->begin || s.end > step->end) continue;
        EXPECT_GE(s.tid, 1000) << "in-flight collectives have their own tracks";
        if (s.args["op"] == "all_gather" && s.args["axis"] == "fsdp") {
          gathered.push_back(s.args["bytes"]);
          EXPECT_TRUE(std::binary_search(payloads.begin(), payloads.end(),
                                         s.args["bytes"].get<int64_t>()))
              << "an fsdp all-gather of " << s.args["bytes"] << " bytes matches no group";
        }
        if (s.args["op"] == "reduce_scatter") {
          EXPECT_EQ(s.args["axis"], "data");
          scattered.push_back(s.args["bytes"]);
        }
      }
      // Every group's gradient is reduce-scattered once per micro-batch.
      std::vector<int64_t> expected;
      for (int m = 0; m < kGradAccum; ++m)
        expected.insert(expected.end(), payloads.begin(), payloads.end());
      std::sort(expected.begin(), expected.end());
      std::sort(scattered.begin(), scattered.end());
      EXPECT_EQ(scattered, expected) << "rank " << rank;
      // The step before dropped every gathered copy, so each group is gathered at least once
      // (more often when its slot was taken between uses).
      std::sort(gathered.begin(), gathered.end());
      EXPECT_TRUE(std::includes(gathered.begin(), gathered.end(), payloads.begin(),
                                payloads.end()))
          << "rank " << rank;
    }
    check_bytes_match_counters(doc, spans, rank, steps);
    memory_counter_totals(doc, rank, steps.size());
  }
  check_summary(result.output, spans, 2);
}

TEST_F(TrainTraceTest, BadProfileStepsAreOneLineAndLeaveNoRunFolder) {
  const fs::path run = root / "bad";
  for (const char* steps : {"3", "a:b", "0:2", "3:2", "2:9", "2:"}) {
    const auto result = run_anvil("train " + tiny_synthetic_args() +
                                  " --training.steps=4 --profile.steps=" + steps +
                                  " --run-dir " + run.string());
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_EQ(result.output.rfind("anvil: error: [config] profile.steps", 0), 0u) << result.output;
    EXPECT_EQ(result.output.find('\n'), result.output.size() - 1) << result.output;
    EXPECT_FALSE(fs::exists(run)) << steps;
  }
}

}  // namespace
}  // namespace anvil
