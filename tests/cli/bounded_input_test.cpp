// Bounded input, end to end through the built binary: a gzip, zstd or xz stream that expands to
// a JSON Lines record several times --max-record-bytes ends `anvil prepare` with one error line
// (file, line, byte offset, bound), no output folder, and a peak RSS (the child's rusage) under
// 1 GB; under --on-error skip the other documents' shards are byte-identical to those of the
// file without that record. Inputs are generated here, streamed through the compressor tools
// (never held in memory, never committed). Also: `anvil tokenize --input` reads compressed
// input and refuses an over-long line, and a JSON array file is refused with how to convert it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "command_runner.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

const std::string kTokenizer =
    std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/llama3_like.tokenizer.json";

struct Tool {
  const char* name;
  const char* command;  // compresses stdin to stdout
  const char* suffix;
};
const Tool kGzip{"gzip", "gzip -1 -c", ".gz"};
const Tool kZstd{"zstd", "zstd -1 -q -c", ".zst"};
const Tool kXz{"xz", "xz -0 -T1 -c", ".xz"};

// Returns "" when the compressor runs here, else why the test skips.
std::string missing_tool(const Tool& tool) {
  const std::string probe = std::string("echo x | ") + tool.command + " > /dev/null 2>&1";
  if (std::system(probe.c_str()) == 0) return "";
  return std::string("'") + tool.name + "' is not installed (scripts/install-deps.sh installs it)";
}

// A folder for this test, named with the pid (ctest runs the binary several times at once).
class Scratch {
 public:
  Scratch() {
    path_ = fs::temp_directory_path() / ("anvil-bounded-input-" + std::to_string(getpid()));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~Scratch() { fs::remove_all(path_); }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

std::string read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// Records before and after the long one: ordinary documents the shards must hold.
std::string records(int first, int count) {
  std::string text;
  for (int i = first; i < first + count; ++i)
    text += "{\"text\": \"document " + std::to_string(i) + " says hello to the bounded reader\"}\n";
  return text;
}

// Writes `path` through `tool`: 20 records, one record whose text is `long_bytes` bytes of
// 'a' (streamed from /dev/zero, so nothing holds it), 20 more records.
void write_with_long_record(const std::string& path, const Tool& tool, uint64_t long_bytes) {
  const std::string script = "{ printf '%s' '" + records(0, 20) +
                             "'; printf '{\"text\": \"'; head -c " + std::to_string(long_bytes) +
                             " /dev/zero | tr '\\0' a; printf '\"}\\n'; printf '%s' '" +
                             records(20, 20) + "'; } | " + tool.command + " > '" + path + "'";
  ASSERT_EQ(std::system(script.c_str()), 0) << script;
}

using test::MeasuredRun;
using test::run_anvil_measured;

// The record over the bound ends the run: one error line naming the file, line 21, the byte
// offset where the record starts and the bound; nothing written; memory near the bound.
void expect_long_record_refused(const Tool& tool, uint64_t bound_mib, uint64_t long_bytes) {
  if (const std::string why = missing_tool(tool); !why.empty()) GTEST_SKIP() << why;
  const Scratch dir;
  const std::string input = dir / (std::string("web.jsonl") + tool.suffix);
  write_with_long_record(input, tool, long_bytes);
  const uint64_t offset = records(0, 20).size();
  const MeasuredRun run = run_anvil_measured(
      {"prepare", "--input", input, "--tokenizer", kTokenizer, "--out", dir / "out",
       "--threads", "1", "--max-record-bytes", std::to_string(bound_mib) + "MiB"},
      dir / "output.txt");
  EXPECT_EQ(run.exit_code, 1) << run.output;
  EXPECT_EQ(std::count(run.output.begin(), run.output.end(), '\n'), 1) << run.output;
  for (const std::string& needle :
       {input + ":21:", "byte " + std::to_string(offset) + " of the decompressed",
        "--max-record-bytes " + std::to_string(bound_mib << 20) + " bytes (" +
            std::to_string(bound_mib) + " MiB)"})
    EXPECT_NE(run.output.find(needle), std::string::npos) << needle << " in " << run.output;
  EXPECT_FALSE(fs::exists(dir / "out"));
  EXPECT_LT(run.peak_rss_mb, 1024.0) << "peak RSS of the refused prepare";
  std::printf("%s: a %llu MiB record over a %llu MiB bound: peak RSS %.0f MB\n", tool.name,
              static_cast<unsigned long long>(long_bytes >> 20),
              static_cast<unsigned long long>(bound_mib), run.peak_rss_mb);
}

// zstd at the default bound (256 MiB) with a 1 GiB record: the case a real download hits.
TEST(BoundedInput, ZstdRecordFourTimesTheDefaultBoundIsOneErrorLine) {
  expect_long_record_refused(kZstd, 256, uint64_t{1} << 30);
}

TEST(BoundedInput, GzipRecordFiveTimesTheBoundIsOneErrorLine) {
  expect_long_record_refused(kGzip, 16, uint64_t{80} << 20);
}

TEST(BoundedInput, XzRecordFiveTimesTheBoundIsOneErrorLine) {
  expect_long_record_refused(kXz, 16, uint64_t{80} << 20);
}

// Under --on-error skip the long record is skipped and counted, and the other 40 documents'
// shards are byte for byte those of the same file without it.
TEST(BoundedInput, SkippedLongRecordLeavesTheOtherShardsByteIdentical) {
  const Scratch dir;
  std::ofstream(dir / "clean.jsonl", std::ios::binary) << records(0, 20) << records(20, 20);
  const MeasuredRun clean = run_anvil_measured(
      {"prepare", "--input", dir / "clean.jsonl", "--tokenizer", kTokenizer, "--out",
       dir / "clean", "--threads", "1", "--split", "0.5,0.25,0.25"},
      dir / "clean.txt");
  ASSERT_EQ(clean.exit_code, 0) << clean.output;
  int compared = 0;
  for (const Tool& tool : {kGzip, kZstd, kXz}) {
    if (!missing_tool(tool).empty()) continue;
    const std::string input = dir / (std::string("long.jsonl") + tool.suffix);
    write_with_long_record(input, tool, uint64_t{5} << 20);
    const std::string out = dir / (std::string("skipped-") + tool.name);
    const MeasuredRun run = run_anvil_measured(
        {"prepare", "--input", input, "--tokenizer", kTokenizer, "--out", out, "--threads", "1",
         "--split", "0.5,0.25,0.25", "--max-record-bytes", "1MiB", "--on-error", "skip"},
        dir / "skipped.txt");
    ASSERT_EQ(run.exit_code, 0) << run.output;
    EXPECT_NE(run.output.find("skipped 1 bad"), std::string::npos) << run.output;
    EXPECT_NE(run.output.find(input + ":21:"), std::string::npos) << run.output;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir / "clean")) {
      if (entry.path().extension() != ".tok") continue;
      const fs::path other = fs::path(out) / entry.path().filename();
      ASSERT_TRUE(fs::exists(other)) << other;
      EXPECT_EQ(read_bytes(other), read_bytes(entry.path())) << other;
      ++compared;
    }
  }
  if (compared == 0) GTEST_SKIP() << "none of gzip, zstd, xz is installed";
}

// `anvil tokenize --input` reads a compressed file like the plain one and refuses a line over
// its --max-record-bytes with one line naming the file and line.
TEST(BoundedInput, TokenizeReadsCompressedInputAndBoundsALine) {
  if (const std::string why = missing_tool(kGzip); !why.empty()) GTEST_SKIP() << why;
  const Scratch dir;
  std::ofstream(dir / "lines.txt", std::ios::binary) << "hello world\nsecond line here\n";
  ASSERT_EQ(std::system(("gzip -c '" + dir / "lines.txt" + "' > '" + dir / "lines.txt.gz" + "'")
                            .c_str()),
            0);
  // Runs tokenize; `redirect` says where stdout and stderr go.
  const auto tokenize = [&](const std::string& input, const std::string& redirect) {
    return test::run_capturing_stdout(std::string(ANVIL_BINARY) + " tokenize --tokenizer " +
                                      kTokenizer + " --input '" + input + "' " + redirect);
  };
  const test::CommandResult plain = tokenize(dir / "lines.txt", "2>&1");
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  EXPECT_EQ(tokenize(dir / "lines.txt.gz", "2>&1").output, plain.output);
  // The lines before it were already written to stdout (tokenize streams); stderr holds the
  // one error line.
  const test::CommandResult refused =
      tokenize(dir / "lines.txt.gz", "--max-record-bytes 11 2>&1 > /dev/null");
  EXPECT_EQ(refused.exit_code, 1) << refused.output;
  EXPECT_EQ(std::count(refused.output.begin(), refused.output.end(), '\n'), 1) << refused.output;
  EXPECT_NE(refused.output.find("lines.txt.gz:2: the line at byte 12 of the decompressed gzip "
                                "stream is longer than --max-record-bytes 11 bytes"),
            std::string::npos)
      << refused.output;
}

// A JSON array (what datasets' to_json(lines=False) writes) is refused in one line that says
// so and how to convert it, by prepare (JSONL or .json) and prepare --sft alike.
TEST(BoundedInput, JsonArrayFileIsRefusedWithHowToConvertIt) {
  const Scratch dir;
  std::ofstream(dir / "records.json", std::ios::binary)
      << "[{\"text\": \"one\"}, {\"text\": \"two\"}]\n";
  std::ofstream(dir / "chats.jsonl", std::ios::binary)
      << "\n  [{\"instruction\": \"hi\", \"output\": \"hello\"}]\n";
  for (const std::string& args :
       {"prepare --input " + dir / "records.json" + " --out " + dir / "out",
        "prepare --sft --input " + dir / "chats.jsonl" + " --out " + dir / "out"}) {
    const test::CommandResult result =
        test::run_anvil(args + " --tokenizer " + kTokenizer + " --threads 1");
    EXPECT_EQ(result.exit_code, 1) << result.output;
    EXPECT_EQ(std::count(result.output.begin(), result.output.end(), '\n'), 1) << result.output;
    EXPECT_NE(result.output.find("is a JSON array"), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("jq -c '.[]'"), std::string::npos) << result.output;
    EXPECT_FALSE(fs::exists(dir / "out"));
  }
}

}  // namespace
}  // namespace anvil
