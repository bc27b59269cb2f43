// The sharding report's text tables: every name appears whole (the longest,
// layers.*.post_attention_layernorm, and LoRA's layers.*.self_attn.q_proj.lora_A) and every
// column lines up, because each column is as wide as its widest cell.
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "parallel/sharding_report.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Harness;
using ptest::RunSpec;

// Returns the lines of `text` from the one starting with `header` up to the next line that
// does not start with two spaces.
std::vector<std::string> table_lines(const std::string& text, const std::string& header) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  bool inside = false;
  for (std::string line; std::getline(in, line);) {
    if (line.starts_with(header)) inside = true;
    if (!inside) continue;
    if (!line.starts_with("  ")) break;
    lines.push_back(line);
  }
  return lines;
}

// Expects every line of a table to be as long as its header and, under each right-aligned
// header label, to end a cell where the label ends, with a space or the line's end after it;
// a left-aligned first column starts at the indent on every line.
void expect_aligned(const std::vector<std::string>& lines, bool first_left_aligned,
                    const std::string& label) {
  ASSERT_GE(lines.size(), 2u) << label;
  const std::string& header = lines[0];
  std::vector<size_t> label_ends;  // the last character of each label after the first
  for (size_t i = 1; i < header.size(); ++i) {
    const bool ends_here = header[i] != ' ' && (i + 1 == header.size() || header[i + 1] == ' ');
    if (ends_here) label_ends.push_back(i);
  }
  if (first_left_aligned) label_ends.erase(label_ends.begin());
  for (const std::string& line : lines) {
    EXPECT_EQ(line.size(), header.size()) << label << ":\n" << header << "\n" << line;
    if (first_left_aligned) {
      EXPECT_NE(line[2], ' ') << label << ": " << line;
    }
    for (const size_t end : label_ends) {
      if (end >= line.size()) continue;  // reported by the length check
      EXPECT_NE(line[end], ' ') << label << " column ending at " << end << ":\n"
                                << header << "\n" << line;
      EXPECT_TRUE(end + 1 == line.size() || line[end + 1] == ' ')
          << label << " column ending at " << end << ":\n" << header << "\n" << line;
    }
  }
}

TEST(ShardingReport, NamesAppearWholeAndColumnsLineUp) {
  auto comm = make_single_process_communicator();
  for (const int lora_r : {0, 4}) {
    RunSpec spec;
    spec.zero_stage = 3;
    spec.lora_r = lora_r;
    Harness harness(*comm, spec);
    const std::string text = sharding_report(harness.engine()).text;
    const std::string label = lora_r > 0 ? "lora" : "full";
    EXPECT_NE(text.find("  layers.*.post_attention_layernorm "), std::string::npos) << text;
    if (lora_r > 0) {
      EXPECT_NE(text.find("  layers.*.self_attn.q_proj.lora_A "), std::string::npos) << text;
    }
    expect_aligned(table_lines(text, "  tensor "), true, label + " tensors");
    expect_aligned(table_lines(text, "  rank "), false, label + " memory");
  }
}

}  // namespace
}  // namespace anvil
