// Compressed corpora (data/compressed_input.h): gzip, zstd and xz files made by the standard
// command-line tools read back byte for byte (over a megabyte, so the 1 MiB output chunk
// refills), whatever their names; concatenated members and frames
// read as one file; a truncated or corrupt stream is one error naming the file, the line and
// the compressed byte offset, never a silent prefix; and the corpus reader gives the same
// documents from a compressed JSONL or text file as from the plain one.
#include "data/compressed_input.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "data/corpus.h"
#include "data_test_util.h"

namespace anvil {
namespace {

using testing::TempDir;

struct Tool {
  Compression kind;
  const char* command;  // compresses stdin to stdout
  const char* suffix;
};
const Tool kTools[] = {{Compression::gzip, "gzip -c", ".gz"},
                       {Compression::zstd, "zstd -q -c", ".zst"},
                       {Compression::xz, "xz -c", ".xz"}};

// Returns "" when `command` (a compressor) runs here, else why the test skips.
std::string missing_tool(const char* command) {
  const std::string probe = std::string("echo x | ") + command + " > /dev/null 2>&1";
  if (std::system(probe.c_str()) == 0) return "";
  return std::string("'") + command + "' is not installed (scripts/install-deps.sh installs it)";
}

void compress(const char* command, const std::string& from, const std::string& to) {
  const std::string line = std::string(command) + " < '" + from + "' > '" + to + "'";
  ASSERT_EQ(std::system(line.c_str()), 0) << line;
}

std::string read_all(DecompressingBuffer& buffer) {
  std::istream in(&buffer);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// About 1.3 MB of JSON Lines (over one 1 MiB chunk, so the buffers refill) with varied, poorly compressible text.
std::string jsonl_corpus() {
  std::string text;
  uint64_t state = 12345;
  for (int record = 0; record < 12000; ++record) {
    text += "{\"id\": " + std::to_string(record) + ", \"text\": \"";
    const int words = 5 + record % 23;
    for (int w = 0; w < words; ++w) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += std::to_string(state >> 40) + (w + 1 < words ? " " : "");
    }
    text += "\"}\n";
  }
  return text;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

std::vector<std::string> documents_of(const std::string& path) {
  CorpusReader reader({path}, CorpusOptions{});
  std::vector<std::string> documents;
  Document doc;
  while (reader.next(doc)) documents.push_back(doc.text);
  return documents;
}

std::string error_of(const std::string& path) {
  try {
    documents_of(path);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(CompressedInput, EveryFormatReadsBackByteForByte) {
  TempDir dir;
  const std::string plain = dir.file("corpus.jsonl");
  const std::string text = jsonl_corpus();
  write_text(plain, text);
  for (const Tool& tool : kTools) {
    if (const std::string why = missing_tool(tool.command); !why.empty()) GTEST_SKIP() << why;
    const std::string packed = dir.file(std::string("corpus.jsonl") + tool.suffix);
    compress(tool.command, plain, packed);
    EXPECT_EQ(detect_compression(packed), tool.kind);
    DecompressingBuffer buffer(packed);
    EXPECT_EQ(read_all(buffer), text) << tool.command;
    EXPECT_EQ(buffer.error(), "");
    EXPECT_EQ(buffer.file_bytes_read(), std::filesystem::file_size(packed));
    // The corpus reader names the kind without the suffix and sees the same records.
    EXPECT_TRUE(is_jsonl_path(packed));
    EXPECT_EQ(documents_of(packed), documents_of(plain)) << tool.command;
  }
}

TEST(CompressedInput, ContentDecidesNotTheName) {
  TempDir dir;
  write_text(dir.file("plain"), "first document\n");
  for (const Tool& tool : kTools) {
    if (const std::string why = missing_tool(tool.command); !why.empty()) GTEST_SKIP() << why;
    const std::string misnamed = dir.file(std::string("notes") + tool.suffix + ".txt");
    compress(tool.command, dir.file("plain"), misnamed);
    EXPECT_EQ(documents_of(misnamed), std::vector<std::string>{"first document\n"});
  }
  // A file without a known magic is read as it is, whatever its name says.
  write_text(dir.file("fake.gz"), "not compressed\n");
  EXPECT_EQ(documents_of(dir.file("fake.gz")), std::vector<std::string>{"not compressed\n"});
}

TEST(CompressedInput, ConcatenatedMembersAndFramesReadAsOne) {
  TempDir dir;
  write_text(dir.file("a"), "alpha\n");
  write_text(dir.file("b"), "beta\n");
  for (const Tool& tool : kTools) {
    if (const std::string why = missing_tool(tool.command); !why.empty()) GTEST_SKIP() << why;
    compress(tool.command, dir.file("a"), dir.file("a.c"));
    compress(tool.command, dir.file("b"), dir.file("b.c"));
    const std::string both = dir.file(std::string("both") + tool.suffix);
    const std::string cat = "cat '" + dir.file("a.c") + "' '" + dir.file("b.c") + "' > '" + both + "'";
    ASSERT_EQ(std::system(cat.c_str()), 0);
    DecompressingBuffer buffer(both);
    EXPECT_EQ(read_all(buffer), "alpha\nbeta\n") << tool.command;
    EXPECT_EQ(buffer.error(), "") << tool.command;
  }
}

TEST(CompressedInput, TruncatedStreamsAreOneErrorWithFileLineAndOffset) {
  TempDir dir;
  const std::string plain = dir.file("corpus.jsonl");
  write_text(plain, jsonl_corpus());
  for (const Tool& tool : kTools) {
    if (const std::string why = missing_tool(tool.command); !why.empty()) GTEST_SKIP() << why;
    const std::string packed = dir.file(std::string("cut.jsonl") + tool.suffix);
    compress(tool.command, plain, packed);
    const auto size = std::filesystem::file_size(packed);
    std::filesystem::resize_file(packed, size / 2);
    const std::string error = error_of(packed);
    EXPECT_NE(error.find("[prepare] " + packed + ":"), std::string::npos) << error;
    EXPECT_NE(error.find(std::string("truncated ") + compression_name(tool.kind) + " stream"),
              std::string::npos)
        << error;
    EXPECT_NE(error.find("byte " + std::to_string(size / 2)), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  }
}

TEST(CompressedInput, CorruptStreamsAreOneErrorEvenWhenBadRecordsAreSkipped) {
  TempDir dir;
  const std::string plain = dir.file("corpus.jsonl");
  write_text(plain, jsonl_corpus());
  for (const Tool& tool : kTools) {
    if (const std::string why = missing_tool(tool.command); !why.empty()) GTEST_SKIP() << why;
    const std::string packed = dir.file(std::string("bad.jsonl") + tool.suffix);
    compress(tool.command, plain, packed);
    std::vector<uint8_t> bytes = testing::read_bytes(packed);
    for (size_t i = bytes.size() / 3; i < bytes.size() / 3 + 64; ++i) bytes[i] ^= 0x5a;
    testing::write_bytes(packed, bytes);
    CorpusReader reader({packed}, CorpusOptions{"text", std::nullopt, /*skip_bad_records=*/true});
    std::string error;
    try {
      Document doc;
      while (reader.next(doc)) {
      }
    } catch (const Error& e) {
      error = e.what();
    }
    EXPECT_NE(error.find("[prepare] " + packed + ":"), std::string::npos) << tool.command;
    EXPECT_NE(error.find("stream"), std::string::npos) << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << "one line: " << error;
  }
}

// A record whose number does not fit a double ("1e999") is a bad record like bad syntax:
// one error with file and line, or skipped with --on-error skip (found by the corrupt-stream
// test, whose garbage decoded into such a number).
TEST(CompressedInput, OutOfRangeNumbersAreBadRecords) {
  TempDir dir;
  write_text(dir.file("n.jsonl"), "{\"text\": \"a\"}\n{\"x\": 1e999, \"text\": \"b\"}\n");
  const std::string error = error_of(dir.file("n.jsonl"));
  EXPECT_NE(error.find("[prepare] " + dir.file("n.jsonl") + ":2: invalid JSON"), std::string::npos)
      << error;
  CorpusReader reader({dir.file("n.jsonl")}, CorpusOptions{"text", std::nullopt, true});
  Document doc;
  std::vector<std::string> documents;
  while (reader.next(doc)) documents.push_back(doc.text);
  EXPECT_EQ(documents, std::vector<std::string>{"a"});
  EXPECT_EQ(reader.skipped_records(), 1u);
}

TEST(CompressedInput, SuffixesAndNames) {
  EXPECT_EQ(strip_compression_suffix("web/part-0.jsonl.zst"), "web/part-0.jsonl");
  EXPECT_EQ(strip_compression_suffix("dolma/v1.json.gz"), "dolma/v1.json");
  EXPECT_EQ(strip_compression_suffix("books.txt.xz"), "books.txt");
  EXPECT_EQ(strip_compression_suffix("plain.jsonl"), "plain.jsonl");
  EXPECT_TRUE(is_jsonl_path("dolma/v1.json.gz"));
  EXPECT_FALSE(is_jsonl_path("config.json"));
  EXPECT_TRUE(is_jsonl_path("a.ndjson.xz"));
  EXPECT_FALSE(is_jsonl_path("book.txt.gz"));
}

}  // namespace
}  // namespace anvil
