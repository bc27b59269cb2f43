// StagingFolder: the all-or-nothing output folder of `anvil prepare` (plain and --sft). Files
// are written into a hidden sibling ".<name>.tmp-<pid>" of --out; commit() renames it onto
// --out (moving a replaced folder aside first and restoring it if the rename fails). A folder
// that is destroyed without commit() deletes itself, so --out is either untouched or complete.
#pragma once

#include <filesystem>
#include <string>

namespace anvil {

class StagingFolder {
 public:
  // Checks --out (absent, empty, or replace_existing) and creates the hidden temp folder.
  StagingFolder(const std::string& out, bool replace_existing);
  ~StagingFolder();
  StagingFolder(const StagingFolder&) = delete;
  StagingFolder& operator=(const StagingFolder&) = delete;

  // Returns the temp folder to write into.
  const std::filesystem::path& path() const { return path_; }
  // Publishes the temp folder as --out.
  void commit();

 private:
  std::filesystem::path out_;
  std::filesystem::path path_;
  std::filesystem::path previous_;
  bool committed_ = false;
};

}  // namespace anvil
