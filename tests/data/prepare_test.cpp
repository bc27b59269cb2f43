// The prepare pipeline with a stand-in byte tokenizer (the real tokenizers are tested in
// tests/tokenizer and end to end in tests/cli/prepare_test.cpp): document discovery and
// splitting rules, shard contents, deterministic split assignment, byte-identical output for
// any thread count, part rollover, and one clear error with nothing left behind per bad input.
#include <gtest/gtest.h>
#include <omp.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/corpus.h"
#include "data/dataloader.h"
#include "data/prepare.h"
#include "byte_tokenizer.h"
#include "data_test_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::ByteTokenizer;
using testing::TempDir;

void write_text(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

nlohmann::json read_meta(const std::string& dir) {
  std::ifstream in(dir + "/meta.json");
  return nlohmann::json::parse(in);
}

// Decodes every document of a split (in shard order), checking BOS/EOS framing.
std::vector<std::string> split_documents(const std::string& dir, const std::string& split) {
  std::vector<std::string> docs;
  const ByteTokenizer tokenizer;
  for (int part = 0; fs::exists(dir + "/" + shard_file_name(split, part)); ++part) {
    ShardReader reader(dir + "/" + shard_file_name(split, part));
    std::vector<int32_t> tokens(reader.token_count());
    reader.read_tokens(0, tokens.size(), tokens.data());
    const auto offsets = reader.doc_offsets();
    for (size_t d = 0; d < offsets.size(); ++d) {
      const size_t end = d + 1 < offsets.size() ? offsets[d + 1] : tokens.size();
      EXPECT_EQ(tokens[offsets[d]], 1);
      EXPECT_EQ(tokens[end - 1], 2);
      docs.push_back(tokenizer.decode(std::span(tokens).subspan(offsets[d], end - offsets[d])));
    }
  }
  return docs;
}

PrepareOptions options_for(const std::vector<std::string>& inputs, const std::string& out) {
  PrepareOptions options;
  options.inputs = inputs;
  options.out_dir = out;
  options.show_progress = false;
  return options;
}

TEST(Prepare, ParsesSplitRatios) {
  EXPECT_EQ(parse_split_ratios("0.8,0.1,0.1"), (std::array<double, 3>{0.8, 0.1, 0.1}));
  EXPECT_EQ(parse_split_ratios("1,0,0"), (std::array<double, 3>{1, 0, 0}));
  for (const char* bad : {"0.8,0.1,0.2", "0.9,0.1", "0.5,0.5,0,0", "-0.1,0.6,0.5", "a,b,c", ""})
    expect_error([&] { parse_split_ratios(bad); }, {"--split must be three numbers", bad});
}

TEST(Prepare, SplitAssignmentIsSeededAndProportional) {
  const std::array<double, 3> ratios = {0.8, 0.1, 0.1};
  std::array<int, 3> counts{};
  int moved = 0;
  for (uint64_t d = 0; d < 20000; ++d) {
    ++counts[split_of_document(d, 5, ratios)];
    moved += split_of_document(d, 5, ratios) != split_of_document(d, 6, ratios);
  }
  EXPECT_NEAR(counts[0] / 20000.0, 0.8, 0.02);
  EXPECT_NEAR(counts[1] / 20000.0, 0.1, 0.02);
  EXPECT_NEAR(counts[2] / 20000.0, 0.1, 0.02);
  EXPECT_GT(moved, 1000);  // another seed is another split
  for (uint64_t d = 0; d < 1000; ++d) EXPECT_EQ(split_of_document(d, 5, {1, 0, 0}), 0);
  for (uint64_t d = 0; d < 1000; ++d) EXPECT_NE(split_of_document(d, 5, {0.5, 0.5, 0}), 2);
}

TEST(Prepare, ResolvesFoldersInSortedOrderSkippingBinaryHiddenAndDuplicates) {
  TempDir dir;
  const fs::path in = dir.path() + "/in";
  write_text(in / "b.txt", "bee");
  write_text(in / "a.txt", "ay");
  write_text(in / "sub" / "c.txt", "sea");
  write_text(in / ".hidden" / "d.txt", "hidden");
  write_text(in / "index.dat", std::string("\0\0\0\2", 4));
  fs::create_symlink(in / "a.txt", in / "z-link.u8");
  const ResolvedInputs resolved = resolve_inputs({in.string()});
  EXPECT_EQ(resolved.files,
            (std::vector<std::string>{(in / "a.txt").string(), (in / "b.txt").string(),
                                      (in / "sub/c.txt").string()}));
  EXPECT_EQ(resolved.skipped_binary, std::vector<std::string>{(in / "index.dat").string()});
  EXPECT_EQ(resolved.skipped_duplicates, std::vector<std::string>{(in / "z-link.u8").string()});
  const ResolvedInputs globbed = resolve_inputs({(in / "*.txt").string()});
  EXPECT_EQ(globbed.files.size(), 2u);
  expect_error([&] { resolve_inputs({(in / "index.dat").string()}); }, {"looks binary"});
  expect_error([&] { resolve_inputs({(in / "*.none").string()}); }, {"matches no files"});
}

TEST(Prepare, ReadsSeparatedTextAndJsonlDocuments) {
  TempDir dir;
  write_text(dir.file("f"), "one\n%\ntwo\nlines\n%\n \n%\n%\nlast");
  write_text(dir.file("r.jsonl"), "{\"text\": \"x\"}\n\n{\"body\": \"y\", \"text\": \"z\"}\n");
  CorpusReader reader({dir.file("f"), dir.file("r.jsonl")}, {"text", std::string("%"), false});
  std::vector<std::pair<std::string, uint64_t>> docs;
  Document doc;
  while (reader.next(doc)) docs.emplace_back(doc.text, doc.line);
  EXPECT_EQ(docs, (std::vector<std::pair<std::string, uint64_t>>{
                      {"one\n", 1}, {"two\nlines\n", 3}, {"last", 9}, {"x", 1}, {"z", 3}}));
  EXPECT_EQ(reader.blank_documents(), 1u);
  EXPECT_EQ(reader.documents_per_file(), (std::vector<uint64_t>{3, 2}));
}

class PrepareRun : public ::testing::Test {
 protected:
  void SetUp() override {
    // 300 documents: 100 files, each holding three separated pieces of varied length.
    for (int f = 0; f < 100; ++f) {
      std::string text;
      for (int piece = 0; piece < 3; ++piece) {
        if (piece > 0) text += "%\n";
        const int doc = f * 3 + piece;
        text += "document " + std::to_string(doc) + " " + std::string(doc % 17, 'x') + "\n";
        expected_.push_back(text.substr(text.rfind("document")));
        splits_.push_back(split_of_text(expected_.back(), 3, {0.8, 0.1, 0.1}));
      }
      write_text(fmt::format("{}/corpus/{:03d}.txt", dir_.path(), f), text);
    }
  }
  PrepareSummary run(const std::string& out, int threads,
                     uint64_t part_tokens = kDefaultPartTokens,
                     const std::string& corpus = "corpus") {
    PrepareOptions options = options_for({dir_.path() + "/" + corpus}, out);
    options.doc_separator = "%";
    options.seed = 3;
    options.part_tokens = part_tokens;
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    const PrepareSummary summary = prepare_dataset(options, tokenizer_);
    omp_set_num_threads(saved);
    return summary;
  }

  TempDir dir_;
  ByteTokenizer tokenizer_;
  std::vector<std::string> expected_;
  std::vector<int> splits_;  // of each document, from its text
};

TEST_F(PrepareRun, ShardsHoldEveryDocumentInItsSplit) {
  const std::string out = dir_.path() + "/out";
  const PrepareSummary summary = run(out, 2);
  ASSERT_EQ(summary.documents, 300u);
  std::array<std::vector<std::string>, 3> by_split;
  uint64_t expected_tokens = 0;
  for (size_t d = 0; d < expected_.size(); ++d) {
    by_split[splits_[d]].push_back(expected_[d]);
    expected_tokens += expected_[d].size() + 2;  // BOS + bytes + EOS
  }
  EXPECT_EQ(summary.tokens, expected_tokens);
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta["tokens"], expected_tokens);
  EXPECT_EQ(meta["tokenizer"]["fingerprint"], "fedcba9876543210");
  EXPECT_EQ(meta["tokenizer"]["adds_bos"], true);
  EXPECT_EQ(meta["token_bytes"], 2);
  EXPECT_EQ(meta["seed"], 3);
  EXPECT_EQ(meta["sources"].size(), 100u);
  EXPECT_EQ(meta["sources"][0]["documents"], 3);
  for (size_t s = 0; s < 3; ++s) {
    EXPECT_EQ(split_documents(out, kSplitNames[s]), by_split[s]) << kSplitNames[s];
    EXPECT_EQ(meta["splits"][kSplitNames[s]]["documents"], by_split[s].size());
  }
  // Nothing but the dataset is left next to it (no staging folder).
  EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), 2);
}

TEST_F(PrepareRun, OutputIsByteIdenticalForAnyThreadCount) {
  run(dir_.path() + "/one", 1);
  run(dir_.path() + "/two", 2);
  run(dir_.path() + "/four", 4);
  for (const char* split : kSplitNames) {
    const auto reference = testing::read_bytes(dir_.path() + "/one/" + shard_file_name(split, 0));
    ASSERT_GT(reference.size(), kShardHeaderBytes);
    EXPECT_EQ(testing::read_bytes(dir_.path() + "/two/" + shard_file_name(split, 0)), reference);
    EXPECT_EQ(testing::read_bytes(dir_.path() + "/four/" + shard_file_name(split, 0)), reference);
  }
}

// The corpus compressed file by file with each tool (names keep their suffix, as corpora
// ship them) prepares into the same shards, byte for byte.
TEST_F(PrepareRun, CompressedCorporaGiveByteIdenticalShards) {
  run(dir_.path() + "/plain", 2);
  for (const auto& [command, suffix] : {std::pair{"gzip -c", ".gz"}, std::pair{"zstd -q -c", ".zst"},
                                        std::pair{"xz -c", ".xz"}}) {
    if (std::system((std::string("echo x | ") + command + " > /dev/null 2>&1").c_str()) != 0) {
      GTEST_SKIP() << "'" << command << "' is not installed (scripts/install-deps.sh installs it)";
    }
    const std::string folder = std::string("corpus") + suffix;
    fs::create_directories(dir_.path() + "/" + folder);
    for (const auto& entry : fs::directory_iterator(dir_.path() + "/corpus")) {
      const std::string to =
          dir_.path() + "/" + folder + "/" + entry.path().filename().string() + suffix;
      const std::string line =
          std::string(command) + " < '" + entry.path().string() + "' > '" + to + "'";
      ASSERT_EQ(std::system(line.c_str()), 0) << line;
    }
    const std::string out = dir_.path() + "/out" + suffix;
    run(out, 2, kDefaultPartTokens, folder);
    for (const char* split : kSplitNames) {
      EXPECT_EQ(testing::read_bytes(out + "/" + shard_file_name(split, 0)),
                testing::read_bytes(dir_.path() + "/plain/" + shard_file_name(split, 0)))
          << command << " " << split;
    }
  }
}

TEST_F(PrepareRun, LargeSplitsRollOverIntoPartsAtDocumentBoundaries) {
  run(dir_.path() + "/whole", 2);
  const PrepareSummary parted = run(dir_.path() + "/parted", 2, /*part_tokens=*/500);
  EXPECT_GT(parted.splits[0].files.size(), 5u);
  EXPECT_EQ(split_documents(dir_.path() + "/parted", "train"),
            split_documents(dir_.path() + "/whole", "train"));
  DataLoader whole(dir_.path() + "/whole", "train", 32, 1),
      parts(dir_.path() + "/parted", "train", 32, 1);
  ASSERT_EQ(whole.windows_per_epoch(), parts.windows_per_epoch());
  std::vector<int32_t> a(64 * 32), b(64 * 32), ta(64 * 32), tb(64 * 32);
  const Shape shape{64, 32};
  whole.fill(0, 64, Tensor(a.data(), DType::i32, shape), Tensor(ta.data(), DType::i32, shape),
             nullptr, nullptr);
  parts.fill(0, 64, Tensor(b.data(), DType::i32, shape), Tensor(tb.data(), DType::i32, shape),
             nullptr, nullptr);
  EXPECT_EQ(a, b);
}

TEST_F(PrepareRun, ReplacesAnExistingOutputOnlyWithForce) {
  const std::string out = dir_.path() + "/out";
  write_text(out + "/keep.txt", "mine");
  expect_error([&] { run(out, 1); }, {"already exists and is not empty", "--force"});
  EXPECT_TRUE(fs::exists(out + "/keep.txt"));
  PrepareOptions options = options_for({dir_.path() + "/corpus"}, out);
  options.replace_existing = true;
  prepare_dataset(options, tokenizer_);
  EXPECT_FALSE(fs::exists(out + "/keep.txt"));
  EXPECT_TRUE(fs::exists(out + "/meta.json"));
}

class PrepareErrors : public ::testing::Test {
 protected:
  // Expects prepare to fail with `needles` and to leave no --out and no staging folder.
  void expect_failure(PrepareOptions options, const std::vector<std::string>& needles,
                      const Tokenizer& tokenizer = ByteTokenizer()) {
    options.out_dir = dir_.path() + "/out";
    options.show_progress = false;
    const auto before =
        std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator());
    expect_error([&] { prepare_dataset(options, tokenizer); }, needles);
    EXPECT_FALSE(fs::exists(options.out_dir));
    EXPECT_EQ(std::distance(fs::directory_iterator(dir_.path()), fs::directory_iterator()), before);
  }
  TempDir dir_;
};

TEST_F(PrepareErrors, MissingInput) {
  expect_failure(options_for({dir_.file("nope.txt")}, ""),
                 {"[prepare] input not found: " + dir_.file("nope.txt")});
}

TEST_F(PrepareErrors, EmptyCorpus) {
  write_text(dir_.file("in/blank.txt"), " \n\n");
  write_text(dir_.file("in/empty.txt"), "");
  expect_failure(options_for({dir_.file("in")}, ""), {"empty corpus", "2 input file(s)"});
}

TEST_F(PrepareErrors, InvalidJsonlLineFailsWithFileAndLine) {
  write_text(dir_.file("in/r.jsonl"),
             "{\"text\": \"fine\"}\n{\"text\": \"fine\"}\n{\"text\": oops}\n");
  expect_failure(options_for({dir_.file("in/r.jsonl")}, ""),
                 {dir_.file("in/r.jsonl") + ":3: invalid JSON", "--on-error skip"});
}

TEST_F(PrepareErrors, MissingTextField) {
  write_text(dir_.file("in/r.jsonl"), "{\"text\": \"fine\"}\n{\"content\": \"no\"}\n");
  expect_failure(options_for({dir_.file("in/r.jsonl")}, ""),
                 {dir_.file("in/r.jsonl") + ":2: record has no 'text' field"});
  PrepareOptions other_field = options_for({dir_.file("in/r.jsonl")}, "");
  other_field.text_field = "body";
  expect_failure(other_field, {":1: record has no 'body' field"});
}

TEST_F(PrepareErrors, TokenizerWithoutEos) {
  write_text(dir_.file("in/a.txt"), "text");
  expect_failure(options_for({dir_.file("in/a.txt")}, ""), {"defines no EOS token"},
                 ByteTokenizer(true, /*has_eos=*/false));
}

TEST(Prepare, SkipModeSkipsBadRecordsAndCountsThem) {
  TempDir dir;
  write_text(dir.file("r.jsonl"),
             "{\"text\": \"a\"}\nnot json\n{\"text\": 5}\n[1]\n{\"text\": \"b\"}\n");
  PrepareOptions options = options_for({dir.file("r.jsonl")}, dir.file("out"));
  options.skip_bad_records = true;
  options.split_ratios = {1, 0, 0};
  const PrepareSummary summary = prepare_dataset(options, ByteTokenizer(false));
  EXPECT_EQ(summary.documents, 2u);
  EXPECT_EQ(summary.skipped_records, 3u);
  EXPECT_EQ(summary.tokens, 4u);  // "a" EOS "b" EOS: no BOS from this tokenizer
  EXPECT_EQ(read_meta(dir.file("out"))["bad_records_skipped"], 3);
  EXPECT_EQ(read_meta(dir.file("out"))["tokenizer"]["adds_bos"], false);
}

}  // namespace
}  // namespace anvil
