// Durable file helpers: atomic replacement, no temporary left behind on failure or abandon,
// clear errors naming the path, and streamed hashing equal to one-shot XXH64.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <xxhash.h>

#include <csignal>

#include "io/file_util.h"
#include "io_test_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::error_of;
using testing::TempDir;

TEST(FileUtil, WriteAtomicCreatesAndReplaces) {
  TempDir dir;
  write_file_atomic(dir / "config.toml", "a = 1\n");
  EXPECT_EQ(read_file(dir / "config.toml"), "a = 1\n");
  write_file_atomic(dir / "config.toml", std::string("b\0c", 3));
  EXPECT_EQ(read_file(dir / "config.toml"), std::string("b\0c", 3));
  EXPECT_FALSE(fs::exists(dir / "config.toml.tmp"));
  write_file_atomic(dir / "empty", "");
  EXPECT_EQ(read_file(dir / "empty"), "");
}

// RLIMIT_FSIZE with SIGXFSZ ignored makes write(2) fail with EFBIG, a real OS write failure
// (what a full disk's ENOSPC looks like to the writer) without a full disk.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    previous_ = std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limited = saved_;
    limited.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &limited);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    std::signal(SIGXFSZ, previous_);
  }

 private:
  struct rlimit saved_;
  void (*previous_)(int);
};

TEST(FileUtil, AFailedWriteNamesTheFileAndTheReasonAndKeepsTheOldFile) {
  TempDir dir;
  write_file_atomic(dir / "model.safetensors", "old");
  std::string message;
  {
    FileSizeLimit limit(4096);
    const std::string bytes(8192, 'x');
    message = error_of([&] { write_file_atomic(dir / "model.safetensors", bytes); });
  }
  EXPECT_NE(message.find("cannot write " + (dir / "model.safetensors").string() +
                         ".tmp: File too large"),
            std::string::npos)
      << message;
  EXPECT_EQ(read_file(dir / "model.safetensors"), "old");
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.tmp"));
}

TEST(FileUtil, AbandonedWriterLeavesNothingAndKeepsTheOldFile) {
  TempDir dir;
  write_file_atomic(dir / "metrics.jsonl", "old");
  {
    AtomicFileWriter writer(dir / "metrics.jsonl");
    writer.write("new and partial");
    EXPECT_EQ(writer.bytes_written(), 15u);
    EXPECT_TRUE(fs::exists(dir / "metrics.jsonl.tmp"));
  }
  EXPECT_FALSE(fs::exists(dir / "metrics.jsonl.tmp"));
  EXPECT_EQ(read_file(dir / "metrics.jsonl"), "old");
}

TEST(FileUtil, ErrorsNameThePath) {
  TempDir dir;
  const fs::path missing = dir / "no-such-dir" / "x";
  EXPECT_NE(error_of([&] { write_file_atomic(missing, "x"); }).find(missing.string() + ".tmp"),
            std::string::npos);
  const std::string read_error = error_of([&] { read_file(dir / "absent"); });
  EXPECT_NE(read_error.find((dir / "absent").string()), std::string::npos);
  EXPECT_NE(read_error.find("No such file"), std::string::npos) << read_error;
  EXPECT_NE(error_of([&] { read_file(dir.path()); }).find("it is a directory"), std::string::npos);
  EXPECT_NE(error_of([&] { MappedFile mapped(dir / "absent"); }).find("cannot open"),
            std::string::npos);
}

TEST(FileUtil, HashesMatchOneShotXxh64) {
  TempDir dir;
  std::string content(3 * (1 << 20) + 17, '\0');  // spans several 1 MiB blocks
  for (size_t i = 0; i < content.size(); ++i) content[i] = static_cast<char>(i * 7 + (i >> 9));
  write_file_atomic(dir / "blob", content);
  EXPECT_EQ(xxhash64_file(dir / "blob"), XXH64(content.data(), content.size(), 0));
  EXPECT_EQ(hash_hex(0x1f), "000000000000001f");
  EXPECT_EQ(hash_hex(XXH64("", 0, 0)), "ef46db3751d8e999");  // xxHash's published empty hash
}

TEST(FileUtil, MappedFileSeesTheContentAndMoves) {
  TempDir dir;
  write_file_atomic(dir / "m", "mapped bytes");
  MappedFile mapped(dir / "m");
  ASSERT_EQ(mapped.size(), 12u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped.data()), mapped.size()),
            "mapped bytes");
  MappedFile moved = std::move(mapped);
  EXPECT_EQ(mapped.data(), nullptr);
  EXPECT_EQ(moved.size(), 12u);
  write_file_atomic(dir / "e", "");
  EXPECT_EQ(MappedFile(dir / "e").size(), 0u);
}

}  // namespace
}  // namespace anvil
