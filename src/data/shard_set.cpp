// ShardSet implementation: part discovery, cross-part consistency and reads that cross part
// boundaries.
#include "data/shard_set.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/input_pieces.h"

namespace anvil {
namespace fs = std::filesystem;
namespace {

constexpr size_t kMaxNamedParts = 10;

// Returns true for "<split>-NNNNN.tok" (five digits).
bool is_part_name(const std::string& name, const std::string& split) {
  const std::string prefix = split + "-";
  if (name.size() != prefix.size() + 9 || name.compare(0, prefix.size(), prefix) != 0) return false;
  if (name.compare(name.size() - 4, 4, ".tok") != 0) return false;
  return std::all_of(name.begin() + prefix.size(), name.end() - 4,
                     [](char c) { return c >= '0' && c <= '9'; });
}

// Returns the shard paths of `split` in one prepare output folder, checking that they are
// numbered from 00000 without gaps.
std::vector<std::string> folder_shards(const std::string& dir, const std::string& split) {
  std::error_code ec;
  size_t names_on_disk = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_part_name(entry.path().filename().string(), split)) ++names_on_disk;
  ANVIL_CHECK(!ec, "[data] {}: cannot list folder: {}", dir, ec.message());
  std::vector<std::string> paths;
  for (int part = 0;; ++part) {
    const std::string path = (fs::path(dir) / shard_file_name(split, part)).string();
    if (!fs::exists(path)) break;
    paths.push_back(path);
  }
  ANVIL_CHECK(!paths.empty(), "[data] {}: no shards for split '{}' (expected {})", dir, split,
              shard_file_name(split, 0));
  ANVIL_CHECK(names_on_disk == paths.size(),
              "[data] {}: split '{}' has {} part files but only {} are numbered contiguously "
              "from 00000 ({} is missing)",
              dir, split, names_on_disk, paths.size(), shard_file_name(split, paths.size()));
  return paths;
}

// Returns N when `name` is "part-IIIII-of-NNNNN", else 0.
uint64_t parts_in_folder_name(const std::string& name) {
  if (name.size() != 19 || name.compare(0, 5, "part-") != 0 || name.compare(10, 4, "-of-") != 0)
    return 0;
  const std::string index = name.substr(5, 5), count = name.substr(14, 5);
  const auto digits = [](const std::string& t) {
    return std::all_of(t.begin(), t.end(), [](char c) { return c >= '0' && c <= '9'; });
  };
  return digits(index) && digits(count) ? std::stoull(count) : 0;
}

// Returns N for a dataset written by N `anvil prepare --part i/N` runs (from its meta.json, or
// from its part folders' names when that is not written yet), 0 for a one-folder dataset.
uint64_t part_count(const std::string& dir) {
  const fs::path meta_path = fs::path(dir) / "meta.json";
  std::error_code ec;
  if (fs::exists(meta_path, ec)) {
    std::ifstream in(meta_path);
    const nlohmann::json meta = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    ANVIL_CHECK(!meta.is_discarded(), "[data] {}: not valid JSON", meta_path.string());
    if (!meta.is_object() || !meta.contains("parts")) return 0;
    ANVIL_CHECK(meta["parts"].is_number_unsigned() && meta["parts"].get<uint64_t>() > 0,
                "[data] {}: 'parts' is not a positive whole number", meta_path.string());
    return meta["parts"].get<uint64_t>();
  }
  uint64_t count = 0;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const uint64_t n = parts_in_folder_name(entry.path().filename().string());
    if (n == 0 || !entry.is_directory()) continue;
    ANVIL_CHECK(count == 0 || count == n,
                "[data] {}: holds parts of datasets cut into {} and into {} parts", dir, count, n);
    count = n;
  }
  return count;
}

}  // namespace

ShardSet::ShardSet(const std::string& dir, const std::string& split) : dir_(dir), split_(split) {
  std::error_code ec;
  ANVIL_CHECK(fs::is_directory(dir, ec), "[data] {}: dataset folder not found", dir);
  std::vector<std::string> paths;
  const uint64_t parts = part_count(dir);
  if (parts == 0) {
    paths = folder_shards(dir, split);
  } else {
    std::vector<std::string> missing;
    for (uint64_t i = 0; i < parts; ++i) {
      const std::string name = PartSpec{static_cast<uint32_t>(i), static_cast<uint32_t>(parts)}
                                   .folder_name();
      if (!fs::exists(fs::path(dir) / name / "meta.json", ec)) missing.push_back(name);
    }
    if (!missing.empty()) {
      std::string names;
      for (size_t m = 0; m < missing.size() && m < kMaxNamedParts; ++m)
        names += (m > 0 ? ", " : "") + missing[m];
      if (missing.size() > kMaxNamedParts)
        names += fmt::format(" and {} more", missing.size() - kMaxNamedParts);
      ANVIL_FAIL("[data] {}: {} of its {} parts are missing: {} (write each with anvil prepare "
                 "--part i/{} and the same arguments)",
                 dir, missing.size(), parts, names, parts);
    }
    for (uint64_t i = 0; i < parts; ++i) {
      const std::string name = PartSpec{static_cast<uint32_t>(i), static_cast<uint32_t>(parts)}
                                   .folder_name();
      for (std::string& path : folder_shards((fs::path(dir) / name).string(), split))
        paths.push_back(std::move(path));
    }
  }
  for (const std::string& path : paths) parts_.emplace_back(path);
  const ShardHeader& first = parts_.front().header();
  for (const ShardReader& part : parts_) {
    const ShardHeader& h = part.header();
    ANVIL_CHECK(h.vocab_size == first.vocab_size &&
                    h.tokenizer_fingerprint == first.tokenizer_fingerprint &&
                    h.eos_id == first.eos_id && h.bos_id == first.bos_id,
                "[data] {}: vocabulary/tokenizer differs from {} (parts of one split must come "
                "from one prepare run)",
                part.path(), parts_.front().path());
    part_starts_.push_back(total_tokens_);
    total_tokens_ += part.token_count();
    total_documents_ += part.document_count();
    has_loss_mask_ = has_loss_mask_ || part.has_loss_mask();
  }
}

std::vector<std::string> ShardSet::files() const {
  std::vector<std::string> paths;
  for (const ShardReader& part : parts_) paths.push_back(part.path());
  return paths;
}

std::string ShardSet::describe() const {
  return fmt::format("split '{}' of {} ({} part{})", split_, dir_, parts_.size(),
                     parts_.size() == 1 ? "" : "s");
}

size_t ShardSet::part_of(uint64_t index) const {
  const auto it = std::upper_bound(part_starts_.begin(), part_starts_.end(), index);
  return static_cast<size_t>(it - part_starts_.begin()) - 1;
}

void ShardSet::read_tokens(uint64_t begin, uint64_t count, int32_t* out) const {
  ANVIL_CHECK(begin <= total_tokens_ && count <= total_tokens_ - begin,
              "[data] {}: token range [{}, {}) outside the {} tokens", describe(), begin,
              begin + count, total_tokens_);
  while (count > 0) {
    const size_t p = part_of(begin);
    const uint64_t local = begin - part_starts_[p];
    const uint64_t take = std::min(count, parts_[p].token_count() - local);
    parts_[p].read_tokens(local, take, out);
    out += take;
    begin += take;
    count -= take;
  }
}

void ShardSet::read_loss_mask(uint64_t begin, uint64_t count, float* out) const {
  ANVIL_CHECK(begin <= total_tokens_ && count <= total_tokens_ - begin,
              "[data] {}: mask range [{}, {}) outside the {} tokens", describe(), begin,
              begin + count, total_tokens_);
  while (count > 0) {
    const size_t p = part_of(begin);
    const uint64_t local = begin - part_starts_[p];
    const uint64_t take = std::min(count, parts_[p].token_count() - local);
    const auto mask = parts_[p].loss_mask();
    for (uint64_t i = 0; i < take; ++i) out[i] = mask.empty() ? 1.0f : mask[local + i];
    out += take;
    begin += take;
    count -= take;
  }
}

void ShardSet::read_doc_ids(uint64_t begin, uint64_t count, int32_t* out) const {
  ANVIL_CHECK(begin <= total_tokens_ && count <= total_tokens_ - begin,
              "[data] {}: range [{}, {}) outside the {} tokens", describe(), begin, begin + count,
              total_tokens_);
  int32_t doc = 0;
  uint64_t pos = 0;  // position inside the requested range
  while (pos < count) {
    const uint64_t global = begin + pos;
    const size_t p = part_of(global);
    const uint64_t local = global - part_starts_[p];
    const uint64_t take = std::min(count - pos, parts_[p].token_count() - local);
    const auto offsets = parts_[p].doc_offsets();
    // First document start at or after `local`; a start at the very first position of the
    // range does not count (it is the window's own first document).
    auto next = std::lower_bound(offsets.begin(), offsets.end(), local);
    for (uint64_t i = 0; i < take; ++i) {
      if (next != offsets.end() && *next == local + i) {
        if (pos + i > 0) ++doc;
        ++next;
      }
      out[pos + i] = doc;
    }
    pos += take;
  }
}

}  // namespace anvil
