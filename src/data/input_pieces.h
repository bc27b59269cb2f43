// The pieces an `anvil prepare` corpus is read in, and which of them one `--part i/N` reads.
// A piece is a Parquet row group, a byte range of an uncompressed JSON Lines file (it owns the
// records whose line starts inside the range), a byte range of an uncompressed text file split
// by --doc-separator (it owns the documents that follow a separator line starting inside the
// range; the first range also the file's first document), or a whole file (compressed files,
// text files read as one document).
// Pieces are listed in document order, and a document's split depends on its text alone
// (prepare.h), so N processes that each read their part together write exactly what one
// process writes, in the same order.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace anvil {

enum class PieceKind { jsonl, text_range, whole_file, parquet };

struct InputPiece {
  size_t file = 0;  // index into the resolved file list
  PieceKind kind = PieceKind::whole_file;
  // JSON Lines and text ranges: the byte range [begin, end) of the file; Parquet: row group
  // `begin`, whose
  // first row is row `end` of the file; unused otherwise.
  uint64_t begin = 0;
  uint64_t end = 0;
  uint64_t bytes = 0;  // its share of the input files' bytes on disk (progress, part balance)
};

struct PartSpec {
  uint32_t index = 0;
  uint32_t count = 1;
  // Returns the folder name of this part inside --out: "part-00001-of-00004".
  std::string folder_name() const;
};

// Parses "i/N" (0 <= i < N, N at most 99999); throws naming the text otherwise.
PartSpec parse_part(const std::string& text);

// Lists the pieces of `files` in document order; uncompressed JSON Lines files, and with
// `split_text` (a --doc-separator given) uncompressed text files, are cut into ranges of about
// `range_bytes`. Opens each Parquet file's footer (`text_field` must be a string column there).
std::vector<InputPiece> plan_pieces(const std::vector<std::string>& files,
                                    const std::string& text_field, uint64_t range_bytes,
                                    bool split_text = false);

// Returns the pieces of part `part`: piece p belongs to part floor(S_p * N / T), where S_p is
// the bytes of the pieces before it and T the total, so parts are contiguous runs of pieces of
// about T / N bytes each (a part may be empty when one piece is larger than T / N).
std::vector<InputPiece> pieces_of_part(const std::vector<InputPiece>& pieces, PartSpec part);

}  // namespace anvil
