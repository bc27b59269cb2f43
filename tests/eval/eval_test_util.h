// Helpers shared by the eval and interop tests: the golden fixture folders written by
// tools/golden/make_hf_golden.py, a self-removing temporary directory, host views, and
// whole-model weight snapshots for bitwise comparisons.
#pragma once

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/error.h"
#include "io/file_util.h"
#include "model/llama.h"

namespace anvil::test {

// The families of tests/eval/golden/, one per supported config style.
inline const std::vector<std::string>& golden_families() {
  static const std::vector<std::string> families = {"llama2", "llama3", "llama31", "llama32",
                                                    "smollm", "mistral", "qwen2"};
  return families;
}

inline std::filesystem::path golden_dir(const std::string& family) {
  return std::filesystem::path(ANVIL_HF_GOLDEN_DIR) / family;
}

inline nlohmann::json golden_json(const std::string& family) {
  return nlohmann::json::parse(read_file(golden_dir(family) / "golden.json"));
}

// A fresh directory under the system temp folder, removed with everything in it at scope end.
// The name carries the process id: ctest runs one test binary under several kernel tables
// at once, and those runs must not share (or delete) each other's files.
class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = std::string("anvil-eval-") + info->test_suite_name() + "-" + info->name() + "-" +
                       std::to_string(::getpid());
    for (char& c : name) {
      if (c == '/') c = '_';
    }
    path_ = std::filesystem::temp_directory_path() / name;
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

template <typename T>
Tensor host_view(std::vector<T>& values, DType dtype, Shape shape) {
  return Tensor(values.data(), dtype, shape);
}

// Returns every weight group of a model concatenated (padding included).
inline std::vector<float> all_weights(LlamaModel& model) {
  std::vector<float> out;
  for (int g = 0; g < model.parameters().group_count(); ++g) {
    const Tensor group = model.parameters().group(g);
    std::vector<float> host(static_cast<size_t>(group.numel()));
    model.backend().copy_to_host(host.data(), group);
    out.insert(out.end(), host.begin(), host.end());
  }
  return out;
}

// Returns one named parameter's f32 values.
inline std::vector<float> weight_values(LlamaModel& model, const std::string& name) {
  const Tensor tensor = model.parameters().tensor(name);
  std::vector<float> host(static_cast<size_t>(tensor.numel()));
  model.backend().copy_to_host(host.data(), tensor);
  return host;
}

// Expects `fn` to throw an anvil::Error whose message contains every fragment.
template <typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
    ADD_FAILURE() << "expected an anvil::Error";
  } catch (const Error& e) {
    const std::string message = e.what();
    for (const std::string& fragment : fragments) {
      EXPECT_NE(message.find(fragment), std::string::npos)
          << "message lacks '" << fragment << "': " << message;
    }
  }
}

}  // namespace anvil::test
