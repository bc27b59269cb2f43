// A file that grows by whole records (metrics.jsonl lines, TensorBoard events). Each record is
// written at once with write(2) (a crash loses at most the record being written), and a write
// that fails part-way (disk full, file size limit) is cut back off, so the file only ever holds
// whole records and every reader sees a valid file.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

namespace anvil {

class AppendFile {
 public:
  // Opens the existing file `path` for appending; `component` ("[metrics]") starts errors.
  AppendFile(std::filesystem::path path, std::string component);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Appends one record; throws naming the file and the system's reason when it cannot, with
  // the file cut back to its previous length.
  void append(std::string_view record);

  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
  std::string component_;
  int fd_ = -1;
  uint64_t size_ = 0;  // bytes of whole records in the file
};

}  // namespace anvil
