// The run report without a browser: chart planning from a hand-made run directory (fields
// the records may gain, such as a memory object, get charts too), the page's self-containment,
// its determinism, nice axis ticks, thinning that keeps spikes, and every bad input failing
// with the file and line before anything is written.
#include "observe/run_report.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "core/error.h"
#include "io/file_util.h"
#include "train/config.h"
#include "observe/svg_chart.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

// The built-in defaults the page compares a run's config.toml against.
const std::string kDefaults = config_to_toml(TrainConfig{});

int occurrences(const std::string& text, const std::string& needle) {
  int count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1))
    ++count;
  return count;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

class RunReport : public ::testing::Test {
 protected:
  void SetUp() override {
    run = fs::temp_directory_path() /
          ("anvil_report_" + std::string(::testing::UnitTest::GetInstance()
                                             ->current_test_info()->name()) +
           "_" + std::to_string(getpid()));
    fs::remove_all(run);
    fs::create_directories(run);
    std::string metrics;
    for (int step = 1; step <= 30; ++step) {
      metrics += fmt::format(
          "{{\"type\":\"train\",\"step\":{},\"loss\":{},\"lr\":0.001,\"grad_norm\":1.5,"
          "\"tokens\":{},\"skipped_steps\":0,\"mem_bytes\":{},\"mem_peak_bytes\":9000,"
          "\"mem_peak\":{{\"activations\":{},\"trainable_weights\":4096}},"
          "\"tokens_per_s\":1000.0,\"mfu\":0.25,\"elapsed_s\":{}}}\n",
          step, 5.0 - 0.1 * step, 64 * step, 5000 + step, 1000 + step, 0.5 * step);
      if (step % 10 == 0) {
        metrics += fmt::format(
            "{{\"type\":\"eval\",\"step\":{},\"loss\":{},\"ppl\":20.0,\"tokens\":512,"
            "\"mmlu_acc\":0.25,\"hellaswag_acc_norm\":0.3,\"elapsed_s\":1.0}}\n",
            step, 4.5 - 0.05 * step);
      }
    }
    write_file_atomic(run / "metrics.jsonl", metrics);
    TrainConfig config;
    config.training.steps = 30;
    write_file_atomic(run / "config.toml", config_to_toml(config));
    write_file_atomic(run / "sharding.json",
                      R"({"mesh":{"world":1,"zero_stage":0},"parameters":{"trainable":10,"all":10},)"
                      R"("memory_per_rank":[{"rank":0,"trainable_weights":2097152,"total":2097152,)"
                      R"("total_peak":3145728,"peak":{"trainable_weights":2097152}}]})");
  }
  void TearDown() override { fs::remove_all(run); }

  fs::path run;
};

TEST_F(RunReport, ChartsEveryGroupOfSeriesAndTheConfiguration) {
  const std::string html = render_run_report(run, kDefaults);
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>\n<html lang=\"en\">"));
  EXPECT_TRUE(html.ends_with("</body>\n</html>\n"));
  // Loss, learning rate, gradient norm, throughput, MFU, memory, the per-category memory
  // peaks, evaluation scores, and train/skipped_steps, which no rule names.
  EXPECT_EQ(occurrences(html, "<svg"), 9);
  for (const char* title : {"Loss", "Learning rate", "Gradient norm", "Throughput",
                            "Model FLOP utilisation", "Memory", "mem_peak", "Evaluation scores",
                            "train/skipped_steps"}) {
    EXPECT_NE(html.find(fmt::format("<title>{}</title>", title)), std::string::npos) << title;
  }
  // Series: train + validation loss, lr, grad norm, tokens/s, mfu, memory held and peak, two
  // category peaks, two scores, skipped steps.
  EXPECT_EQ(occurrences(html, "<polyline"), 13);
  EXPECT_NE(html.find(">peak so far</text>"), std::string::npos);
  EXPECT_NE(html.find(">activations</text>"), std::string::npos);
  // Legends where a chart's title does not name its series: loss, memory, memory peaks, scores.
  EXPECT_EQ(occurrences(html, "fill-opacity=\"0.85\""), 4);
  EXPECT_NE(html.find(">hellaswag_acc_norm</text>"), std::string::npos);
  // Evaluations are sparse: a dot at each of their points (loss, two scores: 3 x 3), and the
  // 30-point train series get dots too (fewer than the marker limit).
  EXPECT_GT(occurrences(html, "<circle"), 9);
  // The summary lists every series, bookkeeping included.
  EXPECT_NE(html.find("<td>eval/ppl</td>"), std::string::npos);
  EXPECT_NE(html.find("<td>train/tokens</td><td class=\"num\">30</td>"), std::string::npos);
  // Configuration: the one key that differs from the defaults is bold.
  EXPECT_NE(html.find("<tr class=\"changed\"><td>steps</td><td>30</td></tr>"),
            std::string::npos);
  EXPECT_EQ(occurrences(html, "class=\"changed\""), 1);
  EXPECT_NE(html.find("<h3>memory per rank (MiB)</h3>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">2.0</td>"), std::string::npos);
  EXPECT_NE(html.find("<td class=\"num\">3.0</td>"), std::string::npos);  // total_peak
  EXPECT_EQ(html.find("<th>peak</th>"), std::string::npos);  // the nested peaks are left out
}

TEST_F(RunReport, ChartsAMixturesTokensAndValidationLossPerSource) {
  std::string metrics;
  for (int step = 1; step <= 4; ++step) {
    metrics += fmt::format(
        "{{\"type\":\"train\",\"step\":{},\"loss\":3.0,\"lr\":0.001,\"grad_norm\":1.0,"
        "\"tokens\":{},\"skipped_steps\":0,\"source_tokens\":{{\"data/web\":{},"
        "\"data/code\":{}}},\"tokens_per_s\":100.0,\"elapsed_s\":1.0}}\n",
        step, step * 64, step * 48, step * 16);
  }
  metrics += "{\"type\":\"eval\",\"step\":4,\"loss\":2.6,\"ppl\":13.5,\"tokens\":64,"
             "\"source_val_loss\":{\"data/web\":2.5,\"data/code\":2.9},\"elapsed_s\":2.0}\n";
  write_file_atomic(run / "metrics.jsonl", metrics);
  const std::string html = render_run_report(run, kDefaults);
  for (const char* title : {"Tokens per source", "Validation loss per source"}) {
    EXPECT_EQ(occurrences(html, fmt::format("<title>{}</title>", title)), 1) << title;
  }
  // Each source is a series named by its path in both charts, never a chart of its own.
  EXPECT_EQ(occurrences(html, ">data/web</text>"), 2);
  EXPECT_EQ(occurrences(html, ">data/code</text>"), 2);
  EXPECT_EQ(html.find("<title>source_tokens</title>"), std::string::npos);
}

TEST_F(RunReport, PageReferencesNothingOutsideItselfAndIsDeterministic) {
  const std::string html = render_run_report(run, kDefaults);
  for (const char* outside : {"http:", "https:", "<script", "src=", "href=", "url(", "@import",
                              "<link", "<img"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
  EXPECT_EQ(render_run_report(run, kDefaults), html);
}

TEST_F(RunReport, BadInputNamesTheFileAndLineAndWritesNothing) {
  const fs::path out = run / "report.html";
  const std::string metrics = (run / "metrics.jsonl").string();
  const std::string good = read_file(run / "metrics.jsonl");
  const auto fails_with = [&](const std::string& expected) {
    EXPECT_EQ(error_of([&] { write_run_report(run, kDefaults, out); }), expected);
    EXPECT_FALSE(fs::exists(out));
    EXPECT_FALSE(fs::exists(out.string() + ".tmp"));
  };
  write_file_atomic(run / "metrics.jsonl", good + "{\"type\":\"train\",\"step\":31,\"lo\n");
  fails_with("[report] " + metrics + ":34: not valid JSON (byte 30 of the line)");
  write_file_atomic(run / "metrics.jsonl", "[1, 2]\n");
  fails_with("[report] " + metrics + ":1: not a metrics record (an object with a \"type\")");
  write_file_atomic(run / "metrics.jsonl", "{\"type\":\"train\",\"loss\":1}\n");
  fails_with("[report] " + metrics + ":1: the record has no integer \"step\"");
  write_file_atomic(run / "metrics.jsonl", "{\"type\":\"train\",\"step\":1,\"loss\":1e400}\n");
  fails_with("[report] " + metrics + ":1: a number is out of range");
  write_file_atomic(run / "metrics.jsonl", "{\"type\":\"train\",\"step\":18446744073709551615}\n");
  fails_with("[report] " + metrics + ":1: \"step\" is out of range: 18446744073709551615");
  write_file_atomic(run / "metrics.jsonl", "{\"type\":\"train\",\"step\":1.5}\n");
  fails_with("[report] " + metrics + ":1: \"step\" must be an integer, got 1.5");
  write_file_atomic(run / "metrics.jsonl", "");
  fails_with("[report] " + metrics + " holds no records yet");
  fs::remove(run / "metrics.jsonl");
  fails_with("[report] " + metrics + " does not exist (is this a run directory of anvil train?)");
  write_file_atomic(run / "metrics.jsonl", good);
  write_file_atomic(run / "config.toml", "[training]\nsteps = = 3\n");
  EXPECT_NE(error_of([&] { write_run_report(run, kDefaults, out); })
                .find("[report] " + (run / "config.toml").string() + ":2:"),
            std::string::npos);
  EXPECT_FALSE(fs::exists(out));
  write_file_atomic(run / "config.toml", "");
  write_file_atomic(run / "sharding.json", "{\"mesh\":");
  fails_with("[report] " + (run / "sharding.json").string() + " is not a JSON object");
  EXPECT_EQ(error_of([&] { render_run_report(run / "absent", kDefaults); }),
            "[report] run directory " + (run / "absent").string() + " does not exist");
}

TEST(SvgChart, TicksAreNiceAndCoverTheData) {
  EXPECT_EQ(nice_ticks(0, 1, 5), (std::vector<double>{0, 0.2, 0.4, 0.6000000000000001, 0.8, 1}));
  EXPECT_EQ(nice_ticks(3, 397, 6), (std::vector<double>{0, 100, 200, 300, 400}));
  const std::vector<double> small = nice_ticks(0.0015, 0.0021, 5);
  ASSERT_EQ(small.size(), 5u);
  EXPECT_DOUBLE_EQ(small.front(), 0.0014);
  EXPECT_DOUBLE_EQ(small.back(), 0.0022);
  const std::vector<double> negative = nice_ticks(-7, 12, 4);
  EXPECT_EQ(negative, (std::vector<double>{-10, -5, 0, 5, 10, 15}));
}

TEST(SvgChart, ThinningALongSeriesKeepsItsSpike) {
  ChartSeries series{"train", {}, false};
  for (int step = 1; step <= 100000; ++step) {
    series.points.emplace_back(step, step == 50000 ? 100.0 : 1.0);
  }
  const std::string svg = render_svg_chart(Chart{"Loss", "loss", {series}});
  const size_t begin = svg.find("points=\"");
  ASSERT_NE(begin, std::string::npos);
  const std::string points = svg.substr(begin, svg.find('"', begin + 8) - begin);
  EXPECT_LE(occurrences(points, ","), 4 * 511);  // at most 4 per pixel column (511)
  // The y axis ends at 100, the top edge of the plot (y = 34), where the spike is drawn.
  EXPECT_NE(points.find(",34.0"), std::string::npos);
  EXPECT_NE(svg.find(">100</text>"), std::string::npos);
}

TEST(SvgChart, EscapesTextAndDrawsAnEmptyChart) {
  EXPECT_EQ(html_escape("a<b & \"c\" 'd'>"), "a&lt;b &amp; &quot;c&quot; &#39;d&#39;&gt;");
  const std::string svg = render_svg_chart(Chart{"<x>", "y", {}});
  EXPECT_NE(svg.find("<title>&lt;x&gt;</title>"), std::string::npos);
  EXPECT_NE(svg.find("no values"), std::string::npos);
}

}  // namespace
}  // namespace anvil
