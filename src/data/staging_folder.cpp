// StagingFolder implementation (see staging_folder.h).
#include "data/staging_folder.h"

#include <unistd.h>

#include <fmt/format.h>

#include "core/error.h"

namespace anvil {
namespace fs = std::filesystem;

StagingFolder::StagingFolder(const std::string& out, bool replace_existing) {
  out_ = fs::path(out).lexically_normal();
  if (out_.filename().empty()) out_ = out_.parent_path();
  ANVIL_CHECK(!out_.empty() && out_.filename() != "." && out_.filename() != "..",
              "[prepare] --out '{}' is not a usable folder name", out);
  std::error_code ec;
  if (fs::exists(out_, ec)) {
    ANVIL_CHECK(fs::is_directory(out_), "[prepare] --out {} exists and is not a folder",
                out_.string());
    ANVIL_CHECK(fs::is_empty(out_) || replace_existing,
                "[prepare] output folder {} already exists and is not empty (choose another "
                "--out, or add --force to replace it)",
                out_.string());
  }
  const fs::path parent = out_.has_parent_path() ? out_.parent_path() : fs::path(".");
  fs::create_directories(parent, ec);
  ANVIL_CHECK(!ec, "[prepare] cannot create folder {}: {}", parent.string(), ec.message());
  const std::string stem = fmt::format(".{}", out_.filename().string());
  path_ = parent / (stem + ".tmp-" + std::to_string(getpid()));
  previous_ = parent / (stem + ".old-" + std::to_string(getpid()));
  fs::remove_all(path_, ec);
  fs::create_directory(path_, ec);
  ANVIL_CHECK(!ec, "[prepare] cannot create folder {}: {}", path_.string(), ec.message());
}

StagingFolder::~StagingFolder() {
  std::error_code ec;
  if (!committed_) fs::remove_all(path_, ec);
}

void StagingFolder::commit() {
  std::error_code ec;
  const bool had_previous = fs::exists(out_, ec);
  if (had_previous) {
    fs::rename(out_, previous_, ec);
    ANVIL_CHECK(!ec, "[prepare] cannot move the old {} aside: {}", out_.string(), ec.message());
  }
  fs::rename(path_, out_, ec);
  if (ec) {
    std::error_code restore;
    if (had_previous) fs::rename(previous_, out_, restore);
    ANVIL_FAIL("[prepare] cannot move the finished dataset to {}: {}", out_.string(),
               ec.message());
  }
  committed_ = true;
  if (had_previous) fs::remove_all(previous_, ec);
}

}  // namespace anvil
