// Run directory creation, naming and locking. The lock protocol: open (creating) run.lock,
// flock(LOCK_EX | LOCK_NB), then check that the path still names the inode we locked (a
// releasing owner unlinks the file before closing it, and a process that opened the old inode
// just before that must retry on the new one); only then is the owner record rewritten.
#include "train/run_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cerrno>
#include <chrono>
#include <climits>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>
#include <system_error>

#include "core/error.h"
#include "core/log.h"
#include "io/file_util.h"

namespace anvil {
namespace {

constexpr const char* kLockFile = "run.lock";
// A path that keeps changing inode under us means something else is deleting it on purpose.
constexpr int kLockAttempts = 8;

// Returns the lock record's content, read through the descriptor (empty when unreadable).
std::string read_record(int fd) {
  std::string text;
  char block[512];
  for (off_t offset = 0; text.size() < 4096;) {
    const ssize_t n = ::pread(fd, block, sizeof(block), offset);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    text.append(block, static_cast<size_t>(n));
    offset += n;
  }
  return text;
}

// Returns "pid N on host H (started T)" for a lock record, or a description of a bad one.
std::string describe_owner(const std::string& record) {
  const nlohmann::json owner = nlohmann::json::parse(record, nullptr, /*allow_exceptions=*/false);
  if (owner.is_discarded() || !owner.is_object()) {
    return record.empty() ? std::string("a process that has not written its lock record yet")
                          : std::string("a process with an unreadable lock record");
  }
  return fmt::format("pid {} on host {} (started {})", owner.value("pid", int64_t{-1}),
                     owner.value("host", std::string("?")), owner.value("started", std::string("?")));
}

}  // namespace

std::filesystem::path RunDirLock::lock_path(const std::filesystem::path& root) {
  return root / kLockFile;
}

RunDirLock::RunDirLock(const std::filesystem::path& root) : root_(root) {
  std::error_code error;
  created_root_ = !std::filesystem::exists(root_, error);
  std::filesystem::create_directories(root_, error);
  ANVIL_CHECK(!error, "[run] cannot create run directory {}: {}", root_.string(), error.message());
  const std::filesystem::path path = lock_path(root_);
  for (int attempt = 0; fd_ < 0; ++attempt) {
    ANVIL_CHECK(attempt < kLockAttempts, "[run] cannot lock run directory {}: {} keeps being "
                "replaced", root_.string(), path.string());
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    ANVIL_CHECK(fd >= 0, "[run] cannot open the lock file {}: {}", path.string(),
                std::strerror(errno));
    int locked;
    do {
      locked = ::flock(fd, LOCK_EX | LOCK_NB);
    } while (locked != 0 && errno == EINTR);
    if (locked != 0) {
      const int reason = errno;
      const std::string record = read_record(fd);
      ::close(fd);
      ANVIL_CHECK(reason != EWOULDBLOCK, "[run] run directory {} is in use by {}; wait for that "
                  "run to finish or stop it, or choose another --run-dir", root_.string(),
                  describe_owner(record));
      ANVIL_FAIL("[run] cannot lock {}: {}", path.string(), std::strerror(reason));
    }
    struct stat held, named;
    if (::fstat(fd, &held) != 0 || ::stat(path.c_str(), &named) != 0 ||
        held.st_ino != named.st_ino || held.st_dev != named.st_dev) {
      ::close(fd);  // the previous owner unlinked what we locked; lock the new file
      continue;
    }
    fd_ = fd;
  }
  const std::string previous = read_record(fd_);
  if (!previous.empty()) {
    // Nobody holds the flock, so whoever wrote this record is gone (crash, kill -9, reboot).
    log_warn("[run] taking over run directory {}: its lock was left by {}, which no longer "
             "holds it", root_.string(), describe_owner(previous));
  }
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  const std::string record = nlohmann::json{{"pid", static_cast<int64_t>(::getpid())},
                                            {"host", host_name()},
                                            {"started", fmt::format("{:%Y-%m-%d %H:%M:%S}", local)}}
                                 .dump() +
                             "\n";
  const bool written = ::ftruncate(fd_, 0) == 0 &&
                       ::pwrite(fd_, record.data(), record.size(), 0) ==
                           static_cast<ssize_t>(record.size()) &&
                       ::fsync(fd_) == 0;
  if (!written) {
    const std::string reason = std::strerror(errno);
    ::unlink(path.c_str());
    ::close(fd_);
    ANVIL_FAIL("[run] cannot write the lock file {}: {}", path.string(), reason);
  }
}

RunDirLock::~RunDirLock() {
  if (fd_ < 0) return;
  // Unlink while still holding the flock: nobody else can own the inode being removed.
  ::unlink(lock_path(root_).c_str());
  ::close(fd_);
  std::error_code ignored;
  if (created_root_ && std::filesystem::is_empty(root_, ignored)) {
    std::filesystem::remove(root_, ignored);
  }
}

std::filesystem::path default_run_dir(const std::string& name) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  return std::filesystem::path("runs") / fmt::format("{}-{:%Y%m%d-%H%M%S}", name, local);
}

RunDir create_run_dir(const std::filesystem::path& root) {
  RunDir run{root};
  std::error_code error;
  std::filesystem::create_directories(run.checkpoints_dir(), error);
  ANVIL_CHECK(!error, "[run] cannot create run directory {}: {}", run.checkpoints_dir().string(),
              error.message());
  return run;
}

void write_run_config(const RunDir& run, const TrainConfig& config) {
  write_file_atomic(run.config_path(), config_to_toml(config));
}

std::string shell_quote(const std::string& arg) {
  const bool plain = !arg.empty() && arg.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                         "0123456789-_./=:,+@%") == std::string::npos;
  if (plain) return arg;
  std::string quoted = "'";
  for (const char c : arg) {
    if (c == '\'') {
      quoted += "'\\''";
    } else {
      quoted += c;
    }
  }
  return quoted + "'";
}

}  // namespace anvil
