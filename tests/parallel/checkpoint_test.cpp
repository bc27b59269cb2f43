// Sharded checkpoint files in one process: a stage-0 checkpoint reloads into stage 3 and both
// continue identically; loading opens each file once (counted by the kernel through inotify);
// files in the one-process trainer's format (no shard offsets) load; missing optimizer state
// is a clear error.
#include <gtest/gtest.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <map>

#include "io/safetensors.h"
#include "parallel/sharded_checkpoint.h"
#include "parallel_test_util.h"

namespace anvil {
namespace {

using ptest::Curve;
using ptest::Harness;
using ptest::RunSpec;

std::filesystem::path fresh_dir(const std::string& name) {
  const std::filesystem::path dir =
      std::filesystem::path(::testing::TempDir()) / ("anvil_parallel_checkpoint_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(ShardedCheckpoint, StageZeroCheckpointContinuesUnderStageThree) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  spec.grad_accum = 2;
  Harness writer(*comm, spec);
  writer.engine().init_weights(spec.seed);
  ptest::run_steps(writer, 0, 5);
  const std::filesystem::path dir = fresh_dir("stage0");
  write_engine_checkpoint(writer.engine(), dir);
  EXPECT_TRUE(std::filesystem::exists(dir / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "optimizer.safetensors"));
  EXPECT_EQ(checkpoint_optimizer_step(dir), 5);
  const Curve want = ptest::run_steps(writer, 5, 10);

  spec.zero_stage = 3;
  Harness reader(*comm, spec);
  read_engine_checkpoint(reader.engine(), dir);
  const Curve got = ptest::run_steps(reader, 5, 10);
  EXPECT_EQ(got.loss_bits, want.loss_bits);
  EXPECT_TRUE(ptest::same_bits(reader.all_weights(), writer.all_weights()));
}

// Counts the opens of the files of one folder as the kernel reports them (inotify), so a test
// sees how often a reader opens each file without a hook in the code under test. Closes are
// watched too: inotify merges an event into an identical one still unread, and a close
// between two opens keeps them apart.
class OpenCounter {
 public:
  explicit OpenCounter(const std::filesystem::path& dir)
      : fd_(inotify_init1(IN_NONBLOCK | IN_CLOEXEC)) {
    if (fd_ >= 0 && inotify_add_watch(fd_, dir.c_str(), IN_OPEN | IN_CLOSE) < 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~OpenCounter() {
    if (fd_ >= 0) close(fd_);
  }
  OpenCounter(const OpenCounter&) = delete;
  OpenCounter& operator=(const OpenCounter&) = delete;

  bool watching() const { return fd_ >= 0; }

  // Returns file name -> opens since the last call.
  std::map<std::string, int> opens() {
    std::map<std::string, int> counts;
    alignas(inotify_event) char buffer[8192];
    for (ssize_t n; (n = read(fd_, buffer, sizeof(buffer))) > 0;) {
      for (ssize_t at = 0; at < n;) {
        const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
        if (event->len > 0 && (event->mask & IN_OPEN) != 0) ++counts[event->name];
        at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
      }
    }
    return counts;
  }

 private:
  int fd_;
};

TEST(ShardedCheckpoint, LoadingOpensEachFileOnce) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  Harness writer(*comm, spec);
  writer.engine().init_weights(spec.seed);
  ptest::run_steps(writer, 0, 2);
  const std::filesystem::path dir = fresh_dir("opens");
  write_engine_checkpoint(writer.engine(), dir);
  Harness reader(*comm, spec);
  OpenCounter counter(dir);
  if (!counter.watching()) GTEST_SKIP() << "inotify is not available here: " << strerror(errno);
  counter.opens();
  read_engine_checkpoint(reader.engine(), dir);
  const std::map<std::string, int> opens = counter.opens();
  const std::map<std::string, int> once = {{"model.safetensors", 1},
                                           {"optimizer.safetensors", 1}};
  EXPECT_EQ(opens, once);
  EXPECT_EQ(reader.engine().optimizer_steps(), 2);
}

TEST(ShardedCheckpoint, ReadsFilesWithoutShardOffsets) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  Harness writer(*comm, spec);
  writer.engine().init_weights(spec.seed);
  ptest::run_steps(writer, 0, 3);
  const std::filesystem::path dir = fresh_dir("plain");
  write_engine_checkpoint(writer.engine(), dir);
  // Rewrite the optimizer file the way the one-process trainer writes it.
  const std::filesystem::path path = dir / "optimizer.safetensors";
  std::vector<std::vector<uint8_t>> copies;
  SafetensorsWriter plain;
  {
    const SafetensorsFile original = SafetensorsFile::open(path);
    for (const SafetensorsEntry& entry : original.entries()) {
      plain.add_copy(entry.name, entry.dtype, entry.shape, entry.bytes());
    }
  }
  plain.set_metadata("step", "3");
  plain.write(path);
  spec.zero_stage = 2;
  Harness reader(*comm, spec);
  read_engine_checkpoint(reader.engine(), dir);
  EXPECT_EQ(ptest::run_steps(reader, 3, 6).loss_bits, ptest::run_steps(writer, 3, 6).loss_bits);
}

TEST(ShardedCheckpoint, MissingOptimizerStateIsAnError) {
  auto comm = make_single_process_communicator();
  RunSpec spec;
  Harness writer(*comm, spec);
  writer.engine().init_weights(spec.seed);
  const std::filesystem::path dir = fresh_dir("missing");
  write_engine_checkpoint(writer.engine(), dir);
  const std::filesystem::path path = dir / "optimizer.safetensors";
  SafetensorsWriter partial;
  {
    const SafetensorsFile original = SafetensorsFile::open(path);
    for (const SafetensorsEntry& entry : original.entries()) {
      if (entry.name == "adamw.v.1") continue;
      partial.add_copy(entry.name, entry.dtype, entry.shape, entry.bytes());
    }
    partial.set_metadata("step", "0");
  }
  partial.write(path);
  Harness reader(*comm, spec);
  try {
    read_engine_checkpoint(reader.engine(), dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW v for group 1"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace anvil
