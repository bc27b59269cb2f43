// Host memory figures from /proc and the cgroup file system (see host_memory.h).
#include "core/host_memory.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string_view>

namespace anvil {
namespace {

// Returns the value of `key` ("MemAvailable:") in /proc/meminfo in bytes, or -1.
int64_t meminfo_bytes(std::string_view key) {
  std::ifstream in("/proc/meminfo");
  std::string name, unit;
  int64_t kib = 0;
  while (in >> name >> kib >> unit) {
    if (name == key) return kib * 1024;
  }
  return -1;
}

// Returns the first number in `path`, or -1 when the file is absent or says "max".
int64_t file_number(const std::string& path) {
  std::ifstream in(path);
  int64_t value = -1;
  if (!(in >> value)) return -1;
  return value;
}

// Returns this process's cgroup v2 directory ("/sys/fs/cgroup/<path>"), or "".
std::string cgroup_v2_dir() {
  std::ifstream in("/proc/self/cgroup");
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with("0::")) return "/sys/fs/cgroup" + line.substr(3);
  }
  return "";
}

// Returns the cgroup's limit less its use in bytes, or -1 when there is no limit.
int64_t cgroup_headroom() {
  const std::string v2 = cgroup_v2_dir();
  if (!v2.empty()) {
    // A limit set on a parent applies too: walk up to the root and keep the tightest.
    int64_t best = -1;
    for (std::string dir = v2; dir.size() >= std::string("/sys/fs/cgroup").size();) {
      const int64_t limit = file_number(dir + "/memory.max");
      const int64_t used = file_number(dir + "/memory.current");
      if (limit >= 0 && used >= 0) {
        const int64_t room = limit > used ? limit - used : 0;
        if (best < 0 || room < best) best = room;
      }
      const auto slash = dir.find_last_of('/');
      if (slash == std::string::npos || dir == "/sys/fs/cgroup") break;
      dir = dir.substr(0, slash);
    }
    if (best >= 0) return best;
  }
  const int64_t limit = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes");
  const int64_t used = file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes");
  // v1 writes a huge number (PAGE_COUNTER_MAX) for "no limit".
  if (limit < 0 || used < 0 || limit >= (int64_t{1} << 60)) return -1;
  return limit > used ? limit - used : 0;
}

// Returns RLIMIT_AS less the address space mapped now, or -1 when unlimited.
int64_t address_space_headroom() {
  rlimit limit{};
  if (getrlimit(RLIMIT_AS, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return -1;
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0;
  if (!(statm >> pages)) return -1;
  const int64_t mapped = pages * sysconf(_SC_PAGESIZE);
  const auto cap = static_cast<int64_t>(limit.rlim_cur);
  return cap > mapped ? cap - mapped : 0;
}

}  // namespace

int64_t host_memory_total() { return std::max<int64_t>(meminfo_bytes("MemTotal:"), 0); }

HostMemoryAvailable host_memory_available() {
  HostMemoryAvailable out;
  auto consider = [&](int64_t bytes, const char* source) {
    if (bytes < 0) return;
    if (out.limited_by.empty() || bytes < out.bytes) {
      out.bytes = bytes;
      out.limited_by = source;
    }
  };
  consider(meminfo_bytes("MemAvailable:"), "MemAvailable");
  consider(cgroup_headroom(), "cgroup memory.max");
  consider(address_space_headroom(), "RLIMIT_AS");
  return out;
}

}  // namespace anvil
