// Corpus-scale prepare: JSON Lines files read in byte ranges, `--part i/N` runs whose union
// reads as the one-process output (same token stream, same windows), the loader refusing a
// folder with parts missing, and Parquet input (files made here with pyarrow through
// tools/parquet_fixture.py) giving the same shards as the same text in JSON Lines, a file of one
// row group read in batches with the memory of the same text in JSON Lines.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "byte_tokenizer.h"
#include "command_runner.h"
#include "data/corpus.h"
#include "data/dataloader.h"
#include "data/input_pieces.h"
#include "data/parquet_input.h"
#include "data/prepare.h"
#include "data/shard_set.h"
#include "data_test_util.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::ByteTokenizer;
using testing::expect_error;
using testing::TempDir;

void write_text(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

// Returns the text of document d: varied lengths, some multi-byte UTF-8, a few duplicates.
std::string document_text(int d) {
  std::string text = "doc " + std::to_string(d % 97) + " ";
  for (int i = 0; i < d % 23; ++i) text += (i % 5 == 0) ? "\u00e9t\u00e9 " : "word ";
  return text;
}

std::string jsonl_corpus(int documents) {
  std::string text;
  for (int d = 0; d < documents; ++d) {
    text += nlohmann::json({{"id", d}, {"text", document_text(d)}}).dump() + "\n";
    if (d % 31 == 0) text += "{\"text\": \"   \"}\n";  // blank: dropped, counted
  }
  return text;
}

// Returns every token of `split`, in the order the loader reads them.
std::vector<int32_t> split_stream(const std::string& dir, const char* split) {
  const ShardSet set(dir, split);
  std::vector<int32_t> tokens(set.token_count());
  set.read_tokens(0, tokens.size(), tokens.data());
  return tokens;
}

// Returns the tokens of the first `count` training samples of `dir` (shuffled windows).
std::vector<int32_t> first_windows(const std::string& dir, int count) {
  DataLoader loader(dir, "train", 16, 7);
  std::vector<int32_t> tokens(count * 16), targets(count * 16);
  const Shape shape{count, 16};
  loader.fill(0, count, Tensor(tokens.data(), DType::i32, shape),
              Tensor(targets.data(), DType::i32, shape), nullptr, nullptr);
  return tokens;
}

class PrepareParts : public ::testing::Test {
 protected:
  void SetUp() override {
    write_text(dir_.file("corpus/a.jsonl"), jsonl_corpus(400));
    std::string separated;
    for (int d = 0; d < 40; ++d) separated += document_text(1000 + d) + "\n%\n";
    write_text(dir_.file("corpus/b.txt"), separated);
    write_text(dir_.file("corpus/c.jsonl"), jsonl_corpus(150));
  }

  PrepareSummary run(const std::string& out, std::optional<PartSpec> part = std::nullopt,
                     uint64_t piece_bytes = kDefaultPieceBytes) {
    PrepareOptions options;
    options.inputs = {dir_.file("corpus")};
    options.out_dir = out;
    options.show_progress = false;
    options.doc_separator = "%";
    options.split_ratios = {0.7, 0.2, 0.1};
    options.part_tokens = 3000;  // several shards per split and part
    options.part = part;
    options.piece_bytes = piece_bytes;
    return prepare_dataset(options, tokenizer_);
  }

  TempDir dir_;
  ByteTokenizer tokenizer_;
};

TEST_F(PrepareParts, JsonlRangesReadAsTheWholeFile) {
  const std::vector<std::string> files = {dir_.file("corpus/a.jsonl")};
  const CorpusOptions options{"text", std::nullopt, false};
  CorpusReader whole(files, plan_pieces(files, "text", kDefaultPieceBytes), options);
  const std::vector<InputPiece> ranges = plan_pieces(files, "text", 37);
  ASSERT_GT(ranges.size(), 100u);
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
  EXPECT_EQ(documents, 400u);
  EXPECT_EQ(whole.bytes_read(), cut.bytes_read());
  EXPECT_EQ(whole.blank_documents(), cut.blank_documents());
}

TEST_F(PrepareParts, BadRecordInALaterRangeNamesItsFileLine) {
  std::string text = jsonl_corpus(60);
  text += "{\"text\": oops}\n";
  const auto line = static_cast<int>(std::count(text.begin(), text.end(), '\n'));
  write_text(dir_.file("bad/r.jsonl"), text);
  PrepareOptions options;
  options.inputs = {dir_.file("bad/r.jsonl")};
  options.out_dir = dir_.file("out");
  options.show_progress = false;
  options.piece_bytes = 50;
  options.part = PartSpec{1, 2};
  expect_error([&] { prepare_dataset(options, tokenizer_); },
               {dir_.file("bad/r.jsonl") + ":" + std::to_string(line) + ": invalid JSON"});
  // Nothing half-written: no part folder, no meta.json.
  EXPECT_TRUE(!fs::exists(options.out_dir) || fs::is_empty(options.out_dir));
}

TEST_F(PrepareParts, PartsTogetherReadAsTheOneProcessOutput) {
  const PrepareSummary one = run(dir_.file("one"));
  for (uint32_t count : {2u, 3u}) {
    const std::string out = dir_.file("parts" + std::to_string(count));
    uint64_t documents = 0;
    // Written in reverse order: which part finishes first must not matter.
    for (uint32_t i = count; i-- > 0;) {
      const PrepareSummary part = run(out, PartSpec{i, count}, /*piece_bytes=*/300);
      EXPECT_GT(part.documents, 0u) << i << "/" << count;
      documents += part.documents;
    }
    EXPECT_EQ(documents, one.documents);
    for (const char* split : kSplitNames)
      EXPECT_EQ(split_stream(out, split), split_stream(dir_.file("one"), split)) << split;
    EXPECT_EQ(first_windows(out, 40), first_windows(dir_.file("one"), 40));
    std::ifstream in(out + "/meta.json");
    const nlohmann::json meta = nlohmann::json::parse(in);
    EXPECT_EQ(meta["parts"], count);
    EXPECT_EQ(meta["tokenizer"]["fingerprint"], "fedcba9876543210");
  }
}

TEST_F(PrepareParts, LoaderRefusesAFolderWithPartsMissingNamingThem) {
  const std::string out = dir_.file("out");
  run(out, PartSpec{0, 3}, 300);
  run(out, PartSpec{2, 3}, 300);
  expect_error([&] { ShardSet(out, "train"); },
               {out, "1 of its 3 parts are missing: part-00001-of-00003", "--part i/3"});
  // Without the shared meta.json the part folders' names still tell how many there are.
  fs::remove(out + "/meta.json");
  expect_error([&] { ShardSet(out, "val"); }, {"part-00001-of-00003"});
  run(out, PartSpec{1, 3}, 300);
  EXPECT_GT(ShardSet(out, "train").token_count(), 0u);
}

TEST_F(PrepareParts, APartGoesOnlyBesideItsOwnDataset) {
  run(dir_.file("one"));
  expect_error([&] { run(dir_.file("one"), PartSpec{0, 2}); },
               {dir_.file("one") + "/meta.json", "other inputs, settings or --part count"});
  run(dir_.file("two"), PartSpec{0, 2});
  expect_error([&] { run(dir_.file("two"), PartSpec{1, 3}); }, {"--part count"});
  expect_error([&] { run(dir_.file("two"), PartSpec{0, 2}); },
               {"part-00000-of-00002 already exists", "--force"});
  for (const char* bad : {"2/2", "a/2", "1", "0/0", "-1/2", "1/2/3"})
    expect_error([&] { parse_part(bad); }, {"--part must be i/N", bad});
  EXPECT_EQ(parse_part("3/8").folder_name(), "part-00003-of-00008");
}

// --- Parquet -------------------------------------------------------------------------------

// Returns a Python with pyarrow (the build's .deps/venv first), or "" when there is none.
std::string python_with_pyarrow() {
  for (const std::string& python :
       {std::string(ANVIL_TEST_DATA) + "/../.deps/venv/bin/python", std::string("python3")}) {
    if (std::system((python + " -c 'import pyarrow.parquet' > /dev/null 2>&1").c_str()) == 0)
      return python;
  }
  return "";
}

class PrepareParquet : public PrepareParts {
 protected:
  void SetUp() override {
    PrepareParts::SetUp();
    if (!parquet_supported())
      GTEST_SKIP() << "this build has no Apache Arrow (ANVIL_WITH_PARQUET; pip install pyarrow)";
    python_ = python_with_pyarrow();
    if (python_.empty())
      GTEST_SKIP() << "no Python with pyarrow to write Parquet files (scripts/install-deps.sh)";
  }

  // Writes `jsonl` as Parquet at `parquet` with tools/parquet_fixture.py and `flags`.
  void make_parquet(const std::string& jsonl, const std::string& parquet,
                    const std::string& flags) {
    fs::create_directories(fs::path(parquet).parent_path());
    const std::string command = python_ + " " + ANVIL_TEST_DATA +
                                "/../tools/parquet_fixture.py '" + jsonl + "' '" + parquet +
                                "' " + flags;
    ASSERT_EQ(std::system(command.c_str()), 0) << command;
  }

  PrepareSummary prepare(const std::string& input, const std::string& out,
                         std::optional<PartSpec> part = std::nullopt) {
    PrepareOptions options;
    options.inputs = {input};
    options.out_dir = out;
    options.show_progress = false;
    options.part_tokens = 3000;
    options.part = part;
    return prepare_dataset(options, tokenizer_);
  }

  std::string python_;
};

TEST_F(PrepareParquet, GivesShardsByteIdenticalToTheSameJsonl) {
  const std::string jsonl = dir_.file("corpus/a.jsonl");
  const PrepareSummary reference = prepare(jsonl, dir_.file("ref"));
  for (const std::string flags :
       {"--compression snappy --row-group-rows 7", "--compression zstd --row-group-rows 100",
        "--compression gzip --large-string --extra-column", "--compression none"}) {
    const std::string out = dir_.file("out");
    fs::remove_all(out);
    make_parquet(jsonl, dir_.file("pq/a.parquet"), flags);
    const PrepareSummary summary = prepare(dir_.file("pq/a.parquet"), out);
    EXPECT_EQ(summary.documents, reference.documents) << flags;
    EXPECT_EQ(summary.blank_documents, reference.blank_documents) << flags;
    for (size_t s = 0; s < kSplitNames.size(); ++s) {
      ASSERT_EQ(summary.splits[s].files, reference.splits[s].files) << flags;
      for (const std::string& name : reference.splits[s].files)
        EXPECT_EQ(testing::read_bytes(out + "/" + name),
                  testing::read_bytes(dir_.file("ref/" + name)))
            << flags << " " << name;
    }
  }
}

TEST_F(PrepareParquet, PartsSplitAtRowGroups) {
  make_parquet(dir_.file("corpus/a.jsonl"), dir_.file("pq/a.parquet"), "--row-group-rows 9");
  prepare(dir_.file("pq/a.parquet"), dir_.file("one"));
  for (uint32_t i = 0; i < 3; ++i)
    prepare(dir_.file("pq/a.parquet"), dir_.file("parts"), PartSpec{i, 3});
  for (const char* split : kSplitNames)
    EXPECT_EQ(split_stream(dir_.file("parts"), split), split_stream(dir_.file("one"), split));
}

// A file written with pyarrow's defaults is one row group (up to 1Mi rows): it is read in
// batches of kParquetBatchRows rows, page by page, so preparing it takes about the memory that
// preparing the same text as JSON Lines takes. Allowed: 64 MB more (a batch, a page, Arrow's
// pools); reading the group whole (pre-buffered column chunk, the whole column decoded, then
// copied) took about 120 MB more for 24 MB of text, and grows with the group.
TEST_F(PrepareParquet, OneRowGroupFileIsReadInBatchesWithFlatMemory) {
  std::string text;
  uint64_t state = 7;
  for (int record = 0; text.size() < (size_t{24} << 20); ++record) {
    text += "{\"text\": \"";
    for (int w = 0; w < 300; ++w) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      text += std::to_string(state >> 44) + " ";
    }
    text += "\"}\n";
  }
  write_text(dir_.file("big/web.jsonl"), text);
  make_parquet(dir_.file("big/web.jsonl"), dir_.file("big/web.parquet"), "");
  ParquetTextReader reader(dir_.file("big/web.parquet"), "text");
  ASSERT_EQ(reader.row_groups(), 1);
  reader.open_group(0);
  ParquetRows rows;
  int64_t total = 0;
  while (reader.next_batch(rows)) {
    EXPECT_LE(static_cast<int64_t>(rows.texts.size()), kParquetBatchRows);
    total += static_cast<int64_t>(rows.texts.size());
  }
  EXPECT_EQ(total, reader.rows_in_group(0));

  const std::string tokenizer =
      std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/llama3_like.tokenizer.json";
  const auto prepare_measured = [&](const std::string& input, const std::string& out) {
    return test::run_anvil_measured({"prepare", "--input", input, "--tokenizer", tokenizer,
                                     "--out", out, "--threads", "1"},
                                    dir_.file("big/output.txt"));
  };
  const test::MeasuredRun jsonl = prepare_measured(dir_.file("big/web.jsonl"), dir_.file("j"));
  ASSERT_EQ(jsonl.exit_code, 0) << jsonl.output;
  const test::MeasuredRun parquet =
      prepare_measured(dir_.file("big/web.parquet"), dir_.file("p"));
  ASSERT_EQ(parquet.exit_code, 0) << parquet.output;
  EXPECT_LE(parquet.peak_rss_mb, jsonl.peak_rss_mb + 64)
      << "JSON Lines " << jsonl.peak_rss_mb << " MB";
  for (const char* shard : {"train-00000.tok", "val-00000.tok"})
    EXPECT_EQ(testing::read_bytes(dir_.file(std::string("p/") + shard)),
              testing::read_bytes(dir_.file(std::string("j/") + shard)));
}

TEST_F(PrepareParquet, NullTextIsABadRecordNamingItsRow) {
  make_parquet(dir_.file("corpus/c.jsonl"), dir_.file("pq/c.parquet"),
               "--null-row 11 --row-group-rows 5");
  expect_error([&] { prepare(dir_.file("pq/c.parquet"), dir_.file("out")); },
               {dir_.file("pq/c.parquet") + ": row 12: field 'text' is null", "--on-error skip"});
  EXPECT_FALSE(fs::exists(dir_.file("out")));
}

TEST_F(PrepareParquet, MissingOrNonStringColumnNamesTheColumns) {
  make_parquet(dir_.file("corpus/c.jsonl"), dir_.file("pq/c.parquet"), "--extra-column");
  PrepareOptions options;
  options.inputs = {dir_.file("pq/c.parquet")};
  options.out_dir = dir_.file("out");
  options.show_progress = false;
  options.text_field = "body";
  expect_error([&] { prepare_dataset(options, tokenizer_); },
               {dir_.file("pq/c.parquet") + ": no column 'body' (columns: id, text;"});
  options.text_field = "id";
  expect_error([&] { prepare_dataset(options, tokenizer_); }, {"column 'id' holds", "not strings"});
}

TEST_F(PrepareParquet, CorruptFooterIsOneErrorLine) {
  const std::string path = dir_.file("pq/c.parquet");
  make_parquet(dir_.file("corpus/c.jsonl"), path, "");
  std::vector<uint8_t> bytes = testing::read_bytes(path);
  ASSERT_GT(bytes.size(), 64u);
  // The footer: Thrift metadata, its 4-byte length, then "PAR1". Scramble the metadata.
  for (size_t i = bytes.size() - 40; i < bytes.size() - 8; ++i) bytes[i] ^= 0xA5;
  testing::write_bytes(path, bytes);
  try {
    prepare(path, dir_.file("out"));
    ADD_FAILURE() << "a corrupt footer was accepted";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("[prepare] " + path + ": not a readable Parquet file"),
              std::string::npos)
        << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  }
  EXPECT_FALSE(fs::exists(dir_.file("out")));
}

TEST(PrepareNoParquet, ABuildWithoutArrowSaysWhatIsMissing) {
  if (parquet_supported())
    GTEST_SKIP() << "this build reads Parquet; the message is for builds without Arrow";
  TempDir dir;
  write_text(dir.file("a.parquet"), std::string("PAR1") + std::string(16, '\0') + "PAR1");
  expect_error([&] { ParquetTextReader(dir.file("a.parquet"), "text"); },
               {dir.file("a.parquet") + ": Parquet input needs a build with Apache Arrow"});
}

}  // namespace
}  // namespace anvil
