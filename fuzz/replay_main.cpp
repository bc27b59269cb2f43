// A main for the fuzz targets outside libFuzzer: replays every file in the folders (or files)
// named on the command line through LLVMFuzzerTestOneInput, in sorted order, so the seed
// corpora and the crashing inputs kept as regressions run as ordinary tests with any compiler.
// A folder that does not exist is reported and skipped (a target may have no regressions yet);
// replaying nothing at all is an error. Hidden files (".gitkeep") are not inputs.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

// Returns the input files a command-line argument names, sorted.
std::vector<fs::path> inputs_of(const fs::path& arg) {
  std::vector<fs::path> files;
  std::error_code error;
  if (fs::is_regular_file(arg, error)) return {arg};
  if (!fs::is_directory(arg, error)) {
    std::printf("replay: %s does not exist; nothing to replay there\n", arg.c_str());
    return files;
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(arg)) {
    if (entry.is_regular_file() && !entry.path().filename().string().starts_with("."))
      files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

}  // namespace

int main(int argc, char** argv) {
  size_t replayed = 0;
  for (int i = 1; i < argc; ++i) {
    for (const fs::path& file : inputs_of(argv[i])) {
      std::ifstream in(file, std::ios::binary);
      const std::vector<char> bytes{std::istreambuf_iterator<char>(in), {}};
      if (in.bad()) {
        std::fprintf(stderr, "replay: cannot read %s\n", file.c_str());
        return 1;
      }
      // Flushed first so that a crash names the input that caused it.
      std::printf("replay: %s\n", file.c_str());
      std::fflush(stdout);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++replayed;
    }
  }
  if (replayed == 0) {
    std::fprintf(stderr, "replay: no inputs found in the folders given\n");
    return 1;
  }
  std::printf("replay: %zu inputs, no crash\n", replayed);
  return 0;
}
