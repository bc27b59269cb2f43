// A task file line holding a number too large for a double is a bad record naming the file and
// line (nlohmann::json reports it as out_of_range, not as a parse error). Found by
// fuzz/task_jsonl_fuzz; the crashing input is kept in fuzz/regressions/task_jsonl_fuzz/.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "eval/task_files.h"

namespace anvil {
namespace {

TEST(TaskFiles, NumberOverflowIsABadRecordNamingTheLine) {
  const std::filesystem::path file =
      std::filesystem::path(::testing::TempDir()) / "number_overflow.jsonl";
  std::ofstream(file) << "{\"label\": 1}\n{\"label\": 1E1111111111}\n";
  std::string message;
  try {
    read_json_lines(file);
  } catch (const Error& e) {
    message = e.what();
  }
  EXPECT_NE(message.find(file.string() + ":2: not a JSON object"), std::string::npos) << message;
  EXPECT_NE(message.find("number overflow"), std::string::npos) << message;
}

}  // namespace
}  // namespace anvil
