// Piece planning and part selection for `anvil prepare` (see input_pieces.h).
#include "data/input_pieces.h"

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>

#include "core/error.h"
#include "data/compressed_input.h"
#include "data/corpus.h"
#include "data/parquet_input.h"

namespace anvil {
namespace fs = std::filesystem;
namespace {

constexpr uint32_t kMaxParts = 99999;

bool parse_count(const std::string& text, uint64_t& value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos ||
      text.size() > 9)
    return false;
  value = std::strtoull(text.c_str(), nullptr, 10);
  return true;
}

}  // namespace

std::string PartSpec::folder_name() const {
  return fmt::format("part-{:05d}-of-{:05d}", index, count);
}

PartSpec parse_part(const std::string& text) {
  const size_t slash = text.find('/');
  uint64_t index = 0, count = 0;
  const bool valid = slash != std::string::npos && parse_count(text.substr(0, slash), index) &&
                     parse_count(text.substr(slash + 1), count) && count >= 1 &&
                     count <= kMaxParts && index < count;
  ANVIL_CHECK(valid, "[prepare] --part must be i/N with 0 <= i < N <= {} (got '{}')", kMaxParts,
              text);
  return PartSpec{static_cast<uint32_t>(index), static_cast<uint32_t>(count)};
}

std::vector<InputPiece> plan_pieces(const std::vector<std::string>& files,
                                    const std::string& text_field, uint64_t range_bytes,
                                    bool split_text) {
  ANVIL_CHECK(range_bytes > 0, "[prepare] piece size must be at least one byte");
  std::vector<InputPiece> pieces;
  for (size_t f = 0; f < files.size(); ++f) {
    std::error_code ec;
    const uint64_t size = fs::file_size(files[f], ec);
    ANVIL_CHECK(!ec, "[prepare] {}: cannot read its size: {}", files[f], ec.message());
    if (is_parquet_file(files[f])) {
      ParquetTextReader reader(files[f], text_field);
      uint64_t first_row = 0;
      for (int g = 0; g < reader.row_groups(); ++g) {
        pieces.push_back(InputPiece{f, PieceKind::parquet, static_cast<uint64_t>(g), first_row,
                                    reader.group_bytes(g)});
        first_row += static_cast<uint64_t>(reader.rows_in_group(g));
      }
      continue;
    }
    const bool jsonl = is_jsonl_path(files[f]);
    const bool compressed = detect_compression(files[f]) != Compression::none;
    if (!jsonl && (!split_text || compressed)) {
      pieces.push_back(InputPiece{f, PieceKind::whole_file, 0, UINT64_MAX, size});
      continue;
    }
    const PieceKind kind = jsonl ? PieceKind::jsonl : PieceKind::text_range;
    if (compressed) {  // a compressed stream cannot be entered in the middle
      pieces.push_back(InputPiece{f, kind, 0, UINT64_MAX, size});
      continue;
    }
    uint64_t begin = 0;
    do {
      const uint64_t end = size - begin > range_bytes ? begin + range_bytes : size;
      pieces.push_back(InputPiece{f, kind, begin, end, end - begin});
      begin = end;
    } while (begin < size);
  }
  return pieces;
}

std::vector<InputPiece> pieces_of_part(const std::vector<InputPiece>& pieces, PartSpec part) {
  unsigned __int128 total = 0;
  for (const InputPiece& piece : pieces) total += piece.bytes;
  std::vector<InputPiece> mine;
  unsigned __int128 start = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    // With no bytes at all (empty files), pieces are dealt by index instead.
    const uint64_t owner = total > 0 ? static_cast<uint64_t>(start * part.count / total)
                                     : p * part.count / pieces.size();
    if (owner == part.index) mine.push_back(pieces[p]);
    start += pieces[p].bytes;
  }
  return mine;
}

}  // namespace anvil
