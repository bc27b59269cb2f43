// Bounded line-oriented input (data/line_reader.h) and what the readers built on it do with it:
// a line of exactly the bound is read and one byte more is too long (skipped, with its line
// number and byte offset); compressed files read like plain ones; a plain text document longer
// than the bound is prepared in pieces of at most the bound cut after whitespace (and one
// without whitespace is a bad record); a JSON array is refused; SFT records stream from a
// compressed file with the long one a bad record; and one text file split by --doc-separator is
// read in byte ranges, so `--part` spreads it over parts that together give the whole.
#include "data/line_reader.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "byte_tokenizer.h"
#include "data/corpus.h"
#include "data/input_pieces.h"
#include "data/prepare.h"
#include "data/sft_records.h"
#include "data/shard_set.h"
#include "data_test_util.h"

namespace anvil {
namespace {

using testing::expect_error;
using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

bool have_gzip() { return std::system("echo x | gzip -c > /dev/null 2>&1") == 0; }

std::string gzip_copy(const std::string& path) {
  const std::string packed = path + ".gz";
  EXPECT_EQ(std::system(("gzip -c '" + path + "' > '" + packed + "'").c_str()), 0);
  return packed;
}

TEST(LineReader, BoundsALineAndSkipsToTheNextNewline) {
  TempDir dir;
  const std::string path = dir.file("lines.txt");
  write_text(path, "12345678\n" + std::string(9, 'x') + "\nend\n" + std::string(30, 'y'));
  LineReader lines(path, 8);
  std::string line;
  ASSERT_EQ(lines.next(line), LineReader::Read::line);  // exactly the bound
  EXPECT_EQ(line, "12345678");
  ASSERT_EQ(lines.next(line), LineReader::Read::too_long);  // one byte over
  EXPECT_TRUE(line.empty());
  EXPECT_EQ(lines.lines(), 2u);
  EXPECT_EQ(lines.line_offset(), 9u);
  ASSERT_EQ(lines.next(line), LineReader::Read::line);
  EXPECT_EQ(line, "end");
  EXPECT_EQ(lines.line_offset(), 19u);
  ASSERT_EQ(lines.next(line), LineReader::Read::too_long);  // the last line has no newline
  EXPECT_FALSE(lines.ended_with_newline());
  EXPECT_EQ(lines.next(line), LineReader::Read::end);
  EXPECT_EQ(lines.offset(), 53u);
}

TEST(LineReader, ReadsACompressedFileLikeThePlainOne) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  std::string text;
  for (int i = 0; i < 50000; ++i) text += "line " + std::to_string(i) + "\n";  // > 1 MiB chunk
  write_text(dir.file("a.txt"), text);
  LineReader plain(dir.file("a.txt"), 64), packed(gzip_copy(dir.file("a.txt")), 64);
  EXPECT_EQ(packed.compression(), Compression::gzip);
  std::string a, b;
  uint64_t count = 0;
  while (plain.next(a) == LineReader::Read::line) {
    ASSERT_EQ(packed.next(b), LineReader::Read::line);
    ASSERT_EQ(a, b);
    ++count;
  }
  EXPECT_EQ(packed.next(b), LineReader::Read::end);
  EXPECT_EQ(count, 50000u);
  EXPECT_EQ(packed.describe_offset(7), "byte 7 of the decompressed gzip stream");
}

TEST(LineReader, TellsAJsonArrayFromJsonLines) {
  TempDir dir;
  write_text(dir.file("array.json"), "\xEF\xBB\xBF \n [{\"text\": \"a\"}]");
  write_text(dir.file("lines.jsonl"), "{\"text\": \"[a]\"}\n");
  EXPECT_TRUE(LineReader(dir.file("array.json"), 100).starts_with_json_array());
  EXPECT_FALSE(LineReader(dir.file("lines.jsonl"), 100).starts_with_json_array());
  CorpusReader reader({dir.file("array.json")}, CorpusOptions{});
  Document doc;
  expect_error([&] { reader.next(doc); }, {"array.json is a JSON array", "jq -c '.[]'"});
}

std::vector<Document> read_documents(const std::string& path, CorpusOptions options) {
  CorpusReader reader({path}, std::move(options));
  std::vector<Document> documents;
  Document doc;
  while (reader.next(doc)) documents.push_back(doc);
  return documents;
}

// A book longer than the bound is read in pieces of at most the bound, each ending after the
// last whitespace inside it; together they are the book, byte for byte.
TEST(CorpusBound, LongTextDocumentIsReadInPiecesCutAtWhitespace) {
  TempDir dir;
  std::string book;
  for (int i = 0; book.size() < 5000; ++i)
    book += "word" + std::to_string(i) + (i % 9 == 8 ? ".\n" : " ");
  write_text(dir.file("book.txt"), book);
  CorpusOptions options;
  options.max_record_bytes = 700;
  const std::vector<Document> pieces = read_documents(dir.file("book.txt"), options);
  ASSERT_GE(pieces.size(), 8u);
  std::string joined;
  uint64_t newlines = 0;
  for (const Document& piece : pieces) {
    EXPECT_LE(piece.text.size(), 700u);
    EXPECT_TRUE(piece.text.back() == ' ' || piece.text.back() == '\n' ||
                &piece == &pieces.back());
    EXPECT_EQ(piece.line, newlines + 1);  // the line each piece starts on
    newlines += static_cast<uint64_t>(std::count(piece.text.begin(), piece.text.end(), '\n'));
    joined += piece.text;
  }
  EXPECT_EQ(joined, book);
  // The same with --doc-separator: each document is cut the same way on its own.
  write_text(dir.file("books.txt"), book + "\n%\n" + book);
  options.doc_separator = "%";
  const std::vector<Document> separated = read_documents(dir.file("books.txt"), options);
  EXPECT_EQ(separated.size(), 2 * pieces.size());
}

TEST(CorpusBound, TextWithoutWhitespaceOverTheBoundIsABadRecord) {
  TempDir dir;
  write_text(dir.file("blob.txt"), "head text " + std::string(3000, 'z') + " tail text\n");
  CorpusOptions options;
  options.max_record_bytes = 1000;
  expect_error([&] { read_documents(dir.file("blob.txt"), options); },
               {"blob.txt:1", "no whitespace in 1000 bytes", "--on-error skip"});
  options.skip_bad_records = true;
  CorpusReader reader({dir.file("blob.txt")}, options);
  Document doc;
  std::string joined;
  while (reader.next(doc)) joined += doc.text;
  // Each whole 1000-byte window without whitespace is one bad record, its bytes dropped: the
  // run of 3000 'z' spans three of them.
  EXPECT_EQ(reader.skipped_records(), 3u);
  EXPECT_NE(joined.find("head text"), std::string::npos);
  EXPECT_NE(joined.find("tail text"), std::string::npos);
}

TEST(CorpusBound, LongJsonlRecordIsSkippedAndCounted) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  write_text(dir.file("r.jsonl"), "{\"text\": \"one\"}\n{\"text\": \"" +
                                       std::string(5000, 'a') + "\"}\n{\"text\": \"three\"}\n");
  const std::string packed = gzip_copy(dir.file("r.jsonl"));
  CorpusOptions options;
  options.max_record_bytes = 1024;
  expect_error([&] { read_documents(packed, options); },
               {"r.jsonl.gz:2: the record at byte 16 of the decompressed gzip stream is longer "
                "than --max-record-bytes 1024 bytes (1 KiB)"});
  options.skip_bad_records = true;
  CorpusReader reader({packed}, options);
  Document doc;
  std::vector<std::string> texts;
  while (reader.next(doc)) texts.push_back(doc.text);
  EXPECT_EQ(texts, (std::vector<std::string>{"one", "three"}));
  EXPECT_EQ(reader.skipped_records(), 1u);
}

TEST(SftBound, CompressedRecordsStreamAndTheLongOneIsBad) {
  if (!have_gzip()) GTEST_SKIP() << "gzip is not installed";
  TempDir dir;
  write_text(dir.file("chat.jsonl"),
             "{\"instruction\": \"hi\", \"output\": \"hello\"}\n{\"instruction\": \"" +
                 std::string(3000, 'q') +
                 "\", \"output\": \"ok\"}\n\n{\"instruction\": \"bye\", \"output\": \"bye\"}\n");
  const SftFileRecords plain = read_sft_file(dir.file("chat.jsonl"), 1000);
  const SftFileRecords packed = read_sft_file(gzip_copy(dir.file("chat.jsonl")), 1000);
  ASSERT_EQ(packed.records.size(), 2u);
  EXPECT_EQ(packed.records[1].line, 4u);
  EXPECT_EQ(packed.records[1].messages[0].content, plain.records[1].messages[0].content);
  ASSERT_EQ(packed.bad.size(), 1u);
  EXPECT_EQ(packed.bad[0].line, 2u);
  EXPECT_NE(packed.bad[0].reason.find("longer than --max-record-bytes 1000 bytes"),
            std::string::npos)
      << packed.bad[0].reason;
}

// One text file split by a separator is cut into byte ranges like a JSON Lines file: each
// range owns the documents after the separator lines that start inside it, so --part i/N
// spreads one large file over all N parts, and the parts together hold what one process
// writes.
TEST(TextRanges, OneSeparatedFileIsSpreadOverParts) {
  TempDir dir;
  std::string text;
  for (int d = 0; d < 300; ++d) {
    text += "document " + std::to_string(d) + " line one\n";
    if (d % 3 == 0) text += "and a second line for " + std::to_string(d) + "\n";
    text += d % 50 == 7 ? "%\r\n" : "%\n";
    if (d % 41 == 0) text += "  \n%\n";  // a blank document: dropped, counted
  }
  write_text(dir.file("quotes.txt"), text);
  const std::vector<std::string> files = {dir.file("quotes.txt")};
  CorpusOptions options;
  options.doc_separator = "%";
  CorpusReader whole(files, plan_pieces(files, "text", kDefaultPieceBytes, true), options);
  const std::vector<InputPiece> ranges = plan_pieces(files, "text", 97, true);
  ASSERT_GT(ranges.size(), 50u);
  CorpusReader cut(files, ranges, options);
  Document a, b;
  uint64_t documents = 0;
  while (whole.next(a)) {
    ASSERT_TRUE(cut.next(b)) << "after " << documents << " documents";
    ASSERT_EQ(a.text, b.text);
    ASSERT_EQ(whole.location(a), cut.location(b));
    ++documents;
  }
  EXPECT_FALSE(cut.next(b));
  EXPECT_EQ(documents, 300u);
  EXPECT_EQ(whole.bytes_read(), cut.bytes_read());
  EXPECT_EQ(whole.blank_documents(), cut.blank_documents());

  // Through prepare --part: both parts hold documents, and together the one-process stream.
  testing::ByteTokenizer tokenizer;
  PrepareOptions prepare;
  prepare.inputs = files;
  prepare.doc_separator = "%";
  prepare.show_progress = false;
  prepare.split_ratios = {1.0, 0.0, 0.0};
  prepare.piece_bytes = 512;
  prepare.out_dir = dir.file("one");
  const PrepareSummary one = prepare_dataset(prepare, tokenizer);
  prepare.out_dir = dir.file("parts");
  uint64_t part_documents = 0;
  for (uint32_t i = 0; i < 2; ++i) {
    prepare.part = PartSpec{i, 2};
    const PrepareSummary part = prepare_dataset(prepare, tokenizer);
    EXPECT_GT(part.documents, 100u) << "part " << i;
    part_documents += part.documents;
  }
  EXPECT_EQ(part_documents, one.documents);
  const ShardSet whole_set(dir.file("one"), "train"), parts_set(dir.file("parts"), "train");
  ASSERT_EQ(parts_set.token_count(), whole_set.token_count());
  std::vector<int32_t> x(whole_set.token_count()), y(parts_set.token_count());
  whole_set.read_tokens(0, x.size(), x.data());
  parts_set.read_tokens(0, y.size(), y.data());
  EXPECT_EQ(x, y);
}

}  // namespace
}  // namespace anvil
