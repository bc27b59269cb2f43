// `anvil report` end to end through the built binary: a trained run renders to one page that
// references nothing outside itself; bad input fails with one line naming the file and line
// and writes nothing; where Debian's chromium is installed, the page renders in headless
// Chromium to the charts it holds (otherwise that test skips, saying why).
#include <gtest/gtest.h>

#include "io/file_util.h"
#include "train_test_support.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing_support::occurrences;
using testing_support::run_anvil;
using testing_support::run_shell;
using testing_support::scratch_dir;
using testing_support::tiny_synthetic_args;

class ReportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root = scratch_dir(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override { fs::remove_all(root); }

  fs::path root;
};

TEST_F(ReportCliTest, ReportIsOneSelfContainedPageAndBadInputWritesNothing) {
  const fs::path run = root / "run";
  const auto trained = run_anvil("train --run-dir " + run.string() + " " +
                                 tiny_synthetic_args() + " --training.steps=20");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  const auto report = run_anvil("report " + run.string());
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string html = read_file(run / "report.html");
  EXPECT_TRUE(html.starts_with("<!DOCTYPE html>")) << html.substr(0, 100);
  // Loss, learning rate, gradient norm, tokens/s, memory (held and peak), the per-category
  // memory peaks, skipped steps, the host's waits on the device and the bytes it read back.
  EXPECT_EQ(occurrences(html, "<svg"), 9) << html;
  EXPECT_NE(html.find("<title>Memory</title>"), std::string::npos);
  EXPECT_NE(html.find("<title>mem_peak</title>"), std::string::npos);
  for (const char* outside : {"http:", "https:", "<script", "src=", "href=", "url(", "@import"}) {
    EXPECT_EQ(html.find(outside), std::string::npos) << outside;
  }
  const auto elsewhere = run_anvil("report " + run.string() + " --out " +
                                   (root / "page.html").string());
  ASSERT_EQ(elsewhere.exit_code, 0) << elsewhere.output;
  EXPECT_EQ(read_file(root / "page.html"), html);

  const auto missing = run_anvil("report " + (root / "nothing").string());
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_EQ(occurrences(missing.output, "anvil: error:"), 1) << missing.output;
  EXPECT_NE(missing.output.find("[report] run directory " + (root / "nothing").string() +
                                " does not exist"),
            std::string::npos)
      << missing.output;

  write_file_atomic(run / "metrics.jsonl", read_file(run / "metrics.jsonl") + "{\"type\":\"tr\n");
  fs::remove(run / "report.html");
  const auto malformed = run_anvil("report " + run.string());
  EXPECT_EQ(malformed.exit_code, 1);
  EXPECT_EQ(occurrences(malformed.output, "anvil: error:"), 1) << malformed.output;
  EXPECT_NE(malformed.output.find("[report] " + (run / "metrics.jsonl").string() +
                                  ":23: not valid JSON"),
            std::string::npos)
      << malformed.output;
  EXPECT_FALSE(fs::exists(run / "report.html"));
  EXPECT_FALSE(fs::exists(run / "report.html.tmp"));
}

// Returns the width and height a PNG file's IHDR chunk states (0, 0 when it is no PNG).
std::pair<uint32_t, uint32_t> png_size(const std::string& png) {
  if (png.size() < 24 || png.compare(0, 8, "\x89PNG\r\n\x1a\n") != 0) return {0, 0};
  const auto be32 = [&](size_t at) {
    uint32_t value = 0;
    for (size_t i = 0; i < 4; ++i) value = value << 8 | static_cast<unsigned char>(png[at + i]);
    return value;
  };
  return {be32(16), be32(20)};
}

TEST_F(ReportCliTest, ReportRendersInHeadlessChromium) {
  if (run_shell("command -v chromium").exit_code != 0) {
    GTEST_SKIP() << "no chromium on PATH (Debian package chromium; not installed by "
                 << "scripts/install-deps.sh for its size); the report's structure is "
                 << "checked without a browser by the test above and RunReport.*";
  }
  const fs::path run = root / "run";
  const auto trained = run_anvil("train --run-dir " + run.string() + " " +
                                 tiny_synthetic_args() + " --training.steps=20");
  ASSERT_EQ(trained.exit_code, 0) << trained.output;
  ASSERT_EQ(run_anvil("report " + run.string()).exit_code, 0);
  // No name resolves, so a page that tried to load anything from elsewhere would not render
  // it; the page is expected to need nothing.
  const std::string chromium =
      "chromium --headless --no-sandbox --disable-gpu --user-data-dir=" +
      (root / "profile").string() + " --host-resolver-rules='MAP * ~NOTFOUND' ";
  const std::string url = "file://" + fs::absolute(run / "report.html").string();
  const auto dom = run_shell(chromium + "--dump-dom " + url + " 2>/dev/null");
  ASSERT_EQ(dom.exit_code, 0) << dom.output;
  EXPECT_EQ(occurrences(dom.output, "<svg"), 9) << dom.output.substr(0, 2000);
  // Loss (train and validation), lr, grad norm, tokens/s, memory held and peak, the seven
  // category peaks, skipped steps.
  EXPECT_EQ(occurrences(dom.output, "<polyline"), 15);
  EXPECT_NE(dom.output.find("<title>Loss</title>"), std::string::npos);

  const fs::path shot = root / "report.png";
  const auto screenshot = run_shell(chromium + "--window-size=1200,1600 --screenshot=" +
                                    shot.string() + " " + url);
  ASSERT_EQ(screenshot.exit_code, 0) << screenshot.output;
  EXPECT_EQ(png_size(read_file(shot)), (std::pair<uint32_t, uint32_t>{1200, 1600}));
  // The same window of an empty page compresses to a few KiB; charts and tables do not.
  write_file_atomic(root / "empty.html", "<!DOCTYPE html><html><body></body></html>");
  const auto blank = run_shell(chromium + "--window-size=1200,1600 --screenshot=" +
                               (root / "empty.png").string() + " file://" +
                               fs::absolute(root / "empty.html").string());
  ASSERT_EQ(blank.exit_code, 0) << blank.output;
  EXPECT_GT(fs::file_size(shot), 4 * fs::file_size(root / "empty.png"));
}

}  // namespace
}  // namespace anvil
