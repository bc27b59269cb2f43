// The run report page. Charts are planned from the series' tags (see run_report.h for the
// order); each series goes into one chart only. Numbers in tables are written with 6
// significant digits, and the page holds nothing that changes between two renderings of the
// same run directory (no time of rendering), so a test can compare pages.
#include "observe/run_report.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"
#include "observe/metrics.h"
#include "observe/svg_chart.h"

namespace anvil {
namespace {

constexpr const char* kStyle = R"css(
body { font-family: sans-serif; margin: 24px; color: #222; max-width: 1260px; }
h1 { font-size: 22px; margin-bottom: 2px; }
h2 { font-size: 18px; margin-top: 28px; border-bottom: 1px solid #ccc; }
h3 { font-size: 14px; margin: 12px 0 4px; }
.path { color: #666; margin-top: 0; font-family: monospace; }
.charts { display: flex; flex-wrap: wrap; gap: 12px; }
.charts svg { border: 1px solid #ddd; width: calc(50% - 8px); min-width: 400px; height: auto; }
.tables { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: left; }
th { background: #f3f3f3; }
td.num { text-align: right; font-family: monospace; }
tr.changed td { font-weight: bold; }
.note { color: #666; font-size: 13px; }
)css";

// Sparse series (evaluations) get a dot at each point.
constexpr size_t kMarkerLimit = 60;

// Counters that run along the x axis and perplexity (the exponential of the validation
// loss): in the summary table, not charted.
bool is_bookkeeping(const std::string& tag) {
  static const std::set<std::string> kTags = {"train/tokens", "train/elapsed_s", "eval/tokens",
                                              "eval/elapsed_s", "eval/ppl"};
  return kTags.contains(tag);
}

std::string number(double value) { return fmt::format("{:.6g}", value); }

class ChartPlanner {
 public:
  explicit ChartPlanner(const std::vector<MetricSeries>& all) : all_(all), used_(all.size()) {}

  // Adds a chart of the unused series that `pick` accepts, named in the legend by `name`
  // (no legend when `name` is null: the title names the one series).
  void add(std::string title, std::string y_label,
           const std::function<bool(const std::string&)>& pick,
           const std::function<std::string(const std::string&)>& name) {
    Chart chart{std::move(title), std::move(y_label), {}, name != nullptr};
    for (size_t i = 0; i < all_.size(); ++i) {
      if (used_[i] || !pick(all_[i].tag)) continue;
      used_[i] = true;
      chart.series.push_back({name ? name(all_[i].tag) : all_[i].tag, all_[i].points,
                              all_[i].points.size() <= kMarkerLimit});
    }
    if (!chart.series.empty()) charts_.push_back(std::move(chart));
  }

  // Adds one chart per object group ("memory/..."), in the order the groups first appear.
  void add_groups() {
    std::vector<std::string> groups;
    for (const MetricSeries& series : all_) {
      const std::string group = series.tag.substr(0, series.tag.find('/'));
      if (group != "train" && group != "eval" &&
          std::find(groups.begin(), groups.end(), group) == groups.end()) {
        groups.push_back(group);
      }
    }
    for (const std::string& group : groups) {
      add(group, group, [&](const std::string& tag) { return tag.starts_with(group + "/"); },
          [&](const std::string& tag) { return tag.substr(group.size() + 1); });
    }
  }

  // Adds a chart for each series not charted yet (bookkeeping aside).
  void add_rest() {
    for (const MetricSeries& series : all_) {
      if (is_bookkeeping(series.tag)) continue;
      add(series.tag, series.tag, [&](const std::string& tag) { return tag == series.tag; },
          nullptr);
    }
  }

  const std::vector<Chart>& charts() const { return charts_; }

 private:
  const std::vector<MetricSeries>& all_;
  std::vector<bool> used_;
  std::vector<Chart> charts_;
};

std::vector<Chart> plan_charts(const std::vector<MetricSeries>& all) {
  const auto is = [](const char* wanted) {
    return [wanted](const std::string& tag) { return tag == wanted; };
  };
  ChartPlanner planner(all);
  planner.add("Loss", "cross-entropy (nats/token)",
              [](const std::string& tag) { return tag == "train/loss" || tag == "eval/loss"; },
              [](const std::string& tag) {
                return tag == "train/loss" ? std::string("train") : std::string("validation");
              });
  planner.add("Learning rate", "learning rate", is("train/lr"), nullptr);
  planner.add("Gradient norm", "global L2 norm", is("train/grad_norm"), nullptr);
  planner.add("Throughput", "tokens/s", is("train/tokens_per_s"), nullptr);
  planner.add("Model FLOP utilisation", "fraction of peak", is("train/mfu"), nullptr);
  // The measured memory (max over ranks): held at each step's end, and the run's peak, beside
  // the pre-flight's planned peak (how good the prediction was on this machine); the
  // per-category peaks ("mem_peak/...") get their own chart from add_groups.
  planner.add("Memory", "bytes",
              [](const std::string& tag) {
                return tag == "train/mem_bytes" || tag == "train/mem_peak_bytes" ||
                       tag == "train/mem_planned_bytes";
              },
              [](const std::string& tag) {
                return tag == "train/mem_bytes"        ? std::string("at step end")
                       : tag == "train/mem_peak_bytes" ? std::string("peak so far")
                                                       : std::string("planned peak");
              });
  // A mixture's sources, named by their data.sources path.
  const auto source_group = [](const char* group) {
    return std::pair{[group](const std::string& tag) { return tag.starts_with(group); },
                     [group](const std::string& tag) { return tag.substr(std::strlen(group)); }};
  };
  const auto [tokens_pick, tokens_name] = source_group("source_tokens/");
  planner.add("Tokens per source", "tokens drawn", tokens_pick, tokens_name);
  const auto [val_pick, val_name] = source_group("source_val_loss/");
  planner.add("Validation loss per source", "cross-entropy (nats/token)", val_pick, val_name);
  planner.add_groups();
  planner.add("Evaluation scores", "score",
              [](const std::string& tag) {
                return tag.starts_with("eval/") && !is_bookkeeping(tag) && tag != "eval/loss";
              },
              [](const std::string& tag) { return tag.substr(5); });
  planner.add_rest();
  return planner.charts();
}

std::string summary_table(const std::vector<MetricSeries>& all) {
  std::string html =
      "<table>\n<tr><th>metric</th><th>points</th><th>last step</th><th>last</th><th>min</th>"
      "<th>max</th></tr>\n";
  for (const MetricSeries& series : all) {
    double low = series.points.front().second, high = low;
    for (const auto& [step, value] : series.points) {
      low = std::min(low, value);
      high = std::max(high, value);
    }
    html += fmt::format(
        "<tr><td>{}</td><td class=\"num\">{}</td><td class=\"num\">{}</td><td class=\"num\">{}"
        "</td><td class=\"num\">{}</td><td class=\"num\">{}</td></tr>\n",
        html_escape(series.tag), series.points.size(), number(series.points.back().first),
        number(series.points.back().second), number(low), number(high));
  }
  return html + "</table>\n";
}

std::string toml_text(const toml::node& node) {
  std::ostringstream out;
  node.visit([&](const auto& value) { out << value; });
  return out.str();
}

toml::table parse_toml_file(const std::filesystem::path& path) {
  ANVIL_CHECK(std::filesystem::is_regular_file(path), "[report] {} does not exist",
              path.string());
  try {
    return toml::parse(read_file(path), path.string());
  } catch (const toml::parse_error& error) {
    ANVIL_FAIL("[report] {}:{}:{}: {}", path.string(), error.source().begin.line,
               error.source().begin.column, error.description());
  }
}

// One table per section; rows whose value differs from the built-in default are bold.
std::string config_tables(const std::filesystem::path& path, const std::string& default_config) {
  const toml::table config = parse_toml_file(path);
  const toml::table defaults = toml::parse(default_config);
  std::string html = "<div class=\"tables\">\n";
  for (const auto& [section, section_node] : config) {
    const toml::table* keys = section_node.as_table();
    if (keys == nullptr) continue;
    html += fmt::format("<div><h3>[{}]</h3>\n<table>\n", html_escape(section.str()));
    for (const auto& [key, value] : *keys) {
      const toml::node_view default_value = defaults[section.str()][key.str()];
      const std::string text = toml_text(value);
      const bool changed = !default_value || toml_text(*default_value.node()) != text;
      html += fmt::format("<tr{}><td>{}</td><td>{}</td></tr>\n", changed ? " class=\"changed\"" : "",
                          html_escape(key.str()), html_escape(text));
    }
    html += "</table></div>\n";
  }
  return html + "</div>\n";
}

std::string key_value_table(const nlohmann::json& object) {
  std::string html = "<table>\n";
  for (const auto& [key, value] : object.items()) {
    html += fmt::format("<tr><td>{}</td><td class=\"num\">{}</td></tr>\n", html_escape(key),
                        html_escape(value.dump()));
  }
  return html + "</table>\n";
}

// The mesh, the parameter counts and each rank's memory by category (MiB) of sharding.json:
// the numbers of each memory_per_rank entry (nested objects, the category peaks, are left out).
std::string sharding_tables(const std::filesystem::path& path) {
  const auto report = nlohmann::json::parse(read_file(path), nullptr, /*allow_exceptions=*/false);
  ANVIL_CHECK(report.is_object(), "[report] {} is not a JSON object", path.string());
  std::string html = "<div class=\"tables\">\n";
  if (report.contains("mesh")) html += "<div><h3>mesh</h3>\n" + key_value_table(report["mesh"]) + "</div>\n";
  if (report.contains("parameters")) {
    html += "<div><h3>parameters</h3>\n" + key_value_table(report["parameters"]) + "</div>\n";
  }
  const nlohmann::json& ranks = report.contains("memory_per_rank") ? report["memory_per_rank"]
                                                                    : nlohmann::json::array();
  if (ranks.is_array() && !ranks.empty() && ranks[0].is_object()) {
    html += "<div><h3>memory per rank (MiB)</h3>\n<table>\n<tr>";
    for (const auto& [kind, bytes] : ranks[0].items()) {
      if (!bytes.is_object()) html += "<th>" + html_escape(kind) + "</th>";
    }
    html += "</tr>\n";
    for (const nlohmann::json& rank : ranks) {
      html += "<tr>";
      for (const auto& [kind, bytes] : rank.items()) {
        if (bytes.is_object()) continue;
        const bool is_bytes = kind != "rank" && bytes.is_number();
        html += fmt::format("<td class=\"num\">{}</td>",
                            is_bytes ? fmt::format("{:.1f}", bytes.get<double>() / (1024.0 * 1024.0))
                                     : html_escape(bytes.dump()));
      }
      html += "</tr>\n";
    }
    html += "</table></div>\n";
  }
  return html + "</div>\n";
}

}  // namespace

std::vector<MetricSeries> read_metric_series(const std::filesystem::path& metrics_path) {
  ANVIL_CHECK(std::filesystem::is_regular_file(metrics_path),
              "[report] {} does not exist (is this a run directory of anvil train?)",
              metrics_path.string());
  std::istringstream lines(read_file(metrics_path));
  std::vector<MetricSeries> all;
  std::map<std::string, size_t> index;
  int64_t line_number = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_number;
    const std::string where = fmt::format("{}:{}", metrics_path.string(), line_number);
    nlohmann::ordered_json record;
    try {
      record = nlohmann::ordered_json::parse(line);
    } catch (const nlohmann::json::parse_error& error) {
      ANVIL_FAIL("[report] {}: not valid JSON (byte {} of the line)", where, error.byte);
    } catch (const nlohmann::json::out_of_range&) {
      // nlohmann reports a number past a double's range (1e400) this way, not as a parse error.
      ANVIL_FAIL("[report] {}: a number is out of range", where);
    }
    ANVIL_CHECK(record.is_object() && record.contains("type") && record["type"].is_string(),
                "[report] {}: not a metrics record (an object with a \"type\")", where);
    ANVIL_CHECK(record.contains("step") && record["step"].is_number(),
                "[report] {}: the record has no integer \"step\"", where);
    const auto step = static_cast<double>(
        json_integer<int64_t>(record["step"], fmt::format("[report] {}: \"step\"", where)));
    for (const MetricScalar& scalar : metric_scalars(record)) {
      auto [it, fresh] = index.try_emplace(scalar.tag, all.size());
      if (fresh) all.push_back({scalar.tag, {}});
      all[it->second].points.emplace_back(step, scalar.value);
    }
  }
  ANVIL_CHECK(line_number > 0, "[report] {} holds no records yet", metrics_path.string());
  return all;
}

std::string render_run_report(const std::filesystem::path& run_dir,
                              const std::string& default_config) {
  ANVIL_CHECK(std::filesystem::is_directory(run_dir), "[report] run directory {} does not exist",
              run_dir.string());
  const std::vector<MetricSeries> series = read_metric_series(run_dir / "metrics.jsonl");
  const std::string config = config_tables(run_dir / "config.toml", default_config);
  const std::filesystem::path sharding_path = run_dir / "sharding.json";
  const std::string sharding =
      std::filesystem::exists(sharding_path) ? sharding_tables(sharding_path) : "";
  const std::string name = std::filesystem::weakly_canonical(run_dir).filename().string();

  std::string html = fmt::format(
      "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
      "<title>anvil run {0}</title>\n<style>{1}</style>\n</head>\n<body>\n"
      "<h1>anvil run {0}</h1>\n<p class=\"path\">{2}</p>\n",
      html_escape(name), kStyle, html_escape(run_dir.string()));
  html += "<h2>Charts</h2>\n<div class=\"charts\">\n";
  for (const Chart& chart : plan_charts(series)) html += render_svg_chart(chart);
  html += "</div>\n<h2>Last values</h2>\n" + summary_table(series);
  if (!sharding.empty()) html += "<h2>Sharding and memory</h2>\n" + sharding;
  html += "<h2>Configuration</h2>\n<p class=\"note\">config.toml; bold: differs from the "
          "built-in default (configs/tiny.toml).</p>\n" +
          config;
  return html + "</body>\n</html>\n";
}

void write_run_report(const std::filesystem::path& run_dir, const std::string& default_config,
                      const std::filesystem::path& out) {
  write_file_atomic(out, render_run_report(run_dir, default_config));
}

}  // namespace anvil
