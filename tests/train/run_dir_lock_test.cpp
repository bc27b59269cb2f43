// RunDirLock in one process: flock(2) locks belong to an open file description, so a second
// RunDirLock on the same directory conflicts with the first exactly as another process would;
// a record nobody holds is stale and taken over; releasing leaves nothing behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/file_util.h"
#include "train/run_dir.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("anvil_lock_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(dir);
  return dir;
}

// Returns the pid of a process that has exited and been reaped (so no process has it now,
// barring reuse within the test's lifetime).
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  waitpid(child, nullptr, 0);
  return child;
}

TEST(RunDirLockTest, ASecondLockIsRefusedNamingTheOwner) {
  const fs::path dir = scratch("second");
  {
    RunDirLock first(dir);
    EXPECT_TRUE(fs::exists(RunDirLock::lock_path(dir)));
    std::string message;
    try {
      RunDirLock second(dir);
    } catch (const Error& e) {
      message = e.what();
    }
    EXPECT_NE(message.find("run directory " + dir.string() + " is in use by pid " +
                           std::to_string(getpid()) + " on host "),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("(started "), std::string::npos) << message;
    EXPECT_TRUE(fs::exists(RunDirLock::lock_path(dir))) << "the refused lock removed the owner's";
  }
  // Released: the lock file is gone, and so is the directory the lock created (still empty).
  EXPECT_FALSE(fs::exists(dir));
  RunDirLock again(dir);
  EXPECT_TRUE(fs::exists(RunDirLock::lock_path(dir)));
}

TEST(RunDirLockTest, KeepsADirectoryItDidNotCreateOrThatHoldsFiles) {
  const fs::path dir = scratch("keep");
  fs::create_directories(dir);
  { RunDirLock lock(dir); }
  EXPECT_TRUE(fs::is_directory(dir));
  EXPECT_FALSE(fs::exists(RunDirLock::lock_path(dir)));
  fs::remove_all(dir);
  {
    RunDirLock lock(dir);
    write_file_atomic(dir / "config.toml", "x");
  }
  EXPECT_TRUE(fs::exists(dir / "config.toml"));
  fs::remove_all(dir);
}

TEST(RunDirLockTest, AStaleLockFileIsTakenOver) {
  const fs::path dir = scratch("stale");
  fs::create_directories(dir);
  const pid_t gone = dead_pid();
  {
    std::ofstream record(RunDirLock::lock_path(dir));
    record << "{\"pid\":" << gone << ",\"host\":\"elsewhere\",\"started\":\"2001-01-01\"}\n";
  }
  testing::internal::CaptureStderr();
  {
    RunDirLock lock(dir);
    const std::string record = read_file(RunDirLock::lock_path(dir));
    EXPECT_NE(record.find("\"pid\":" + std::to_string(getpid())), std::string::npos) << record;
  }
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_NE(warning.find("taking over run directory " + dir.string() + ": its lock was left by pid " +
                         std::to_string(gone) + " on host elsewhere (started 2001-01-01)"),
            std::string::npos)
      << warning;
  EXPECT_FALSE(fs::exists(RunDirLock::lock_path(dir)));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace anvil
