// `anvil prepare` end to end, running the built binary on Debian fortunes files with a fixture
// tokenizer: token counts equal the per-document tokenizer counts plus BOS/EOS framing (checked
// through the library and through `anvil tokenize`), shards decode back to the documents,
// output is byte-identical across --threads, and every bad input gives one error line, exit 1
// and no output folder.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "command_runner.h"
#include "data/dataloader.h"
#include "data/prepare.h"
#include "data/shard_reader.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;

const fs::path kFortunes = "/usr/share/games/fortunes";
const std::vector<std::string> kFortuneFiles = {"fortunes", "debian", "goedel"};
const std::string kTokenizer =
    std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/llama3_like.tokenizer.json";

using Result = test::CommandResult;
using test::run_anvil;

class Scratch {
 public:
  Scratch() {
    std::string pattern = (fs::temp_directory_path() / "anvil-prepare-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~Scratch() { fs::remove_all(path_); }
  fs::path operator/(const std::string& name) const { return path_ / name; }
  const fs::path& path() const { return path_; }
  size_t entries() const {
    return static_cast<size_t>(
        std::distance(fs::directory_iterator(path_), fs::directory_iterator()));
  }

 private:
  fs::path path_;
};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::string fortune_inputs() {
  std::string args;
  for (const auto& name : kFortuneFiles) args += " " + (kFortunes / name).string();
  return args;
}

// Splits a fortunes file at lines holding only "%", independently of the library's reader.
std::vector<std::string> fortune_documents(const fs::path& path) {
  std::vector<std::string> docs;
  std::istringstream in(read_text(path));
  std::string line, piece;
  while (std::getline(in, line)) {
    if (line == "%") {
      if (piece.find_first_not_of(" \t\n") != std::string::npos) docs.push_back(piece);
      piece.clear();
    } else {
      piece += line + (in.eof() ? "" : "\n");
    }
  }
  if (piece.find_first_not_of(" \t\n") != std::string::npos) docs.push_back(piece);
  return docs;
}

// Returns the tokens of every document in a split, in shard order.
std::vector<std::vector<int32_t>> split_documents(const fs::path& dir, const std::string& split) {
  std::vector<std::vector<int32_t>> docs;
  for (int part = 0; fs::exists(dir / shard_file_name(split, part)); ++part) {
    ShardReader reader((dir / shard_file_name(split, part)).string());
    std::vector<int32_t> tokens(reader.token_count());
    reader.read_tokens(0, tokens.size(), tokens.data());
    const auto offsets = reader.doc_offsets();
    for (size_t d = 0; d < offsets.size(); ++d) {
      const size_t end = d + 1 < offsets.size() ? offsets[d + 1] : tokens.size();
      docs.emplace_back(tokens.begin() + offsets[d], tokens.begin() + end);
    }
  }
  return docs;
}

nlohmann::json read_meta(const fs::path& dir) {
  return nlohmann::json::parse(read_text(dir / "meta.json"));
}

class PrepareCli : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const auto& name : kFortuneFiles)
      if (!fs::exists(kFortunes / name)) GTEST_SKIP() << "Debian fortunes not installed";
  }
  Scratch scratch_;
};

TEST_F(PrepareCli, FortunesTokenCountIsDocumentTokensPlusBosAndEos) {
  const fs::path out = scratch_ / "out";
  const Result run = run_anvil("prepare --input" + fortune_inputs() + " --tokenizer " + kTokenizer +
                               " --out " + out.string() + " --doc-separator %");
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("prepare: "), std::string::npos) << "no progress line";

  const auto tokenizer = Tokenizer::load(kTokenizer);
  ASSERT_TRUE(tokenizer->bos_id() && tokenizer->eos_id());
  ASSERT_EQ(tokenizer->special_prefix(), std::vector<int32_t>{*tokenizer->bos_id()});
  std::vector<std::string> documents;
  for (const auto& name : kFortuneFiles)
    for (auto& doc : fortune_documents(kFortunes / name)) documents.push_back(std::move(doc));
  uint64_t expected_tokens = 0;
  std::array<std::vector<std::string>, 3> by_split;
  for (size_t d = 0; d < documents.size(); ++d) {
    expected_tokens += tokenizer->encode(documents[d], false).size() + 2;  // + BOS + EOS
    by_split[split_of_text(documents[d], 0, {0.8, 0.1, 0.1})].push_back(documents[d]);
  }

  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta["documents"], documents.size());
  EXPECT_EQ(meta["tokens"], expected_tokens);
  EXPECT_EQ(meta["tokenizer"]["fingerprint"], tokenizer->fingerprint());
  EXPECT_EQ(meta["tokenizer"]["adds_bos"], true);
  uint64_t shard_tokens = 0;
  for (size_t s = 0; s < 3; ++s) {
    const auto docs = split_documents(out, kSplitNames[s]);
    ASSERT_EQ(docs.size(), by_split[s].size()) << kSplitNames[s];
    for (size_t d = 0; d < docs.size(); ++d) {
      shard_tokens += docs[d].size();
      ASSERT_GE(docs[d].size(), 2u);
      EXPECT_EQ(docs[d].front(), *tokenizer->bos_id());
      EXPECT_EQ(docs[d].back(), *tokenizer->eos_id());
      const std::span<const int32_t> body(docs[d].data() + 1, docs[d].size() - 2);
      EXPECT_EQ(tokenizer->decode(body), by_split[s][d]) << kSplitNames[s] << " document " << d;
    }
  }
  EXPECT_EQ(shard_tokens, expected_tokens);
  std::printf("fortunes (%zu files): %zu documents, %llu tokens = document tokens + BOS + EOS\n",
              kFortuneFiles.size(), documents.size(),
              static_cast<unsigned long long>(expected_tokens));

  DataLoader loader(out.string(), "train", 64, 1);
  EXPECT_EQ(loader.windows_per_epoch(),
            static_cast<int64_t>((meta["splits"]["train"]["tokens"].get<uint64_t>() - 1) / 64));
  EXPECT_EQ(loader.tokenizer_fingerprint(), tokenizer->fingerprint());
}

TEST_F(PrepareCli, TokenCountMatchesTheTokenizeCommand) {
  // One-line documents, so `anvil tokenize` (one array per line) sees exactly each document.
  std::ofstream lines(scratch_ / "lines.txt"), records(scratch_ / "docs.jsonl");
  size_t documents = 0;
  for (const auto& doc : fortune_documents(kFortunes / "goedel")) {
    std::istringstream in(doc);
    for (std::string line; std::getline(in, line);) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;
      lines << line << "\n";
      records << nlohmann::json{{"text", line}}.dump() << "\n";
      ++documents;
    }
  }
  lines.close();
  records.close();
  const Result plain = run_anvil("tokenize --no-special --tokenizer " + kTokenizer + " --input " +
                                 (scratch_ / "lines.txt").string());
  ASSERT_EQ(plain.exit_code, 0) << plain.output;
  const Result framed = run_anvil("tokenize --tokenizer " + kTokenizer + " --input " +
                                  (scratch_ / "lines.txt").string());
  ASSERT_EQ(framed.exit_code, 0) << framed.output;
  uint64_t tokenize_total = 0;
  size_t arrays = 0;
  std::istringstream plain_lines(plain.output), framed_lines(framed.output);
  for (std::string a, b; std::getline(plain_lines, a) && std::getline(framed_lines, b); ++arrays) {
    const auto ids = nlohmann::json::parse(a), with_bos = nlohmann::json::parse(b);
    tokenize_total += ids.size();
    ASSERT_EQ(with_bos.size(), ids.size() + 1);  // the post-processor adds BOS
  }
  ASSERT_EQ(arrays, documents);

  const fs::path out = scratch_ / "out";
  const Result run = run_anvil("prepare --input " + (scratch_ / "docs.jsonl").string() +
                               " --tokenizer " + kTokenizer + " --out " + out.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta["documents"], documents);
  EXPECT_EQ(meta["tokens"], tokenize_total + 2 * documents);  // + BOS + EOS per document
  uint64_t shard_tokens = 0;
  for (const char* split : kSplitNames)
    shard_tokens += ShardReader((out / shard_file_name(split, 0)).string()).token_count();
  EXPECT_EQ(shard_tokens, tokenize_total + 2 * documents);
  std::printf("goedel lines: %zu documents, anvil tokenize total %llu, shards %llu\n", documents,
              static_cast<unsigned long long>(tokenize_total),
              static_cast<unsigned long long>(shard_tokens));
}

TEST_F(PrepareCli, OutputIsByteIdenticalForOneAndTwoThreads) {
  for (const char* threads : {"1", "2"}) {
    const Result run = run_anvil("prepare --input" + fortune_inputs() + " --tokenizer " +
                                 kTokenizer + " --doc-separator % --threads " + threads +
                                 " --out " + (scratch_ / threads).string());
    ASSERT_EQ(run.exit_code, 0) << run.output;
  }
  size_t compared = 0;
  for (const auto& entry : fs::directory_iterator(scratch_ / "1")) {
    const std::string name = entry.path().filename().string();
    EXPECT_EQ(read_text(entry.path()), read_text(scratch_ / "2" / name)) << name;
    ++compared;
  }
  EXPECT_EQ(compared, 4u);  // three shards and meta.json
}

TEST_F(PrepareCli, BadInputsFailWithOneLineAndNoOutput) {
  std::ofstream(scratch_ / "blank.txt") << "\n  \n";
  std::ofstream(scratch_ / "bad.jsonl")
      << "{\"text\": \"ok\"}\n{\"text\": broken\n{\"text\": \"ok\"}\n";
  std::ofstream(scratch_ / "nofield.jsonl") << "{\"body\": \"x\"}\n";
  std::ofstream(scratch_ / "good.txt") << "some text\n";
  const std::string out = (scratch_ / "out").string();
  const std::string common = " --tokenizer " + kTokenizer + " --out " + out;
  const size_t inputs = scratch_.entries();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"--input " + (scratch_ / "missing.txt").string(),
       "anvil: error: [prepare] input not found: " + (scratch_ / "missing.txt").string()},
      {"--input " + (scratch_ / "blank.txt").string(), "anvil: error: [prepare] empty corpus"},
      {"--input " + (scratch_ / "bad.jsonl").string(),
       "anvil: error: [prepare] " + (scratch_ / "bad.jsonl").string() + ":2: invalid JSON"},
      {"--input " + (scratch_ / "nofield.jsonl").string(),
       "nofield.jsonl:1: record has no 'text' field"},
      {"--input " + (scratch_ / "good.txt").string() + " --split 0.5,0.5,0.5",
       "--split must be three numbers"},
      {"--input " + (scratch_ / "good.txt").string() + " --on-error maybe", "--on-error"},
  };
  for (const auto& [args, message] : cases) {
    const Result run = run_anvil("prepare " + args + common);
    EXPECT_EQ(run.exit_code, 1) << args << "\n" << run.output;
    EXPECT_NE(run.output.find(message), std::string::npos) << args << "\n" << run.output;
    EXPECT_FALSE(fs::exists(out)) << args;
    EXPECT_EQ(scratch_.entries(), inputs) << "left a staging folder behind: " << args;
  }
}

TEST_F(PrepareCli, SkipModeWarnsAndGoesOn) {
  std::ofstream(scratch_ / "bad.jsonl")
      << "{\"text\": \"ok\"}\n{\"text\": broken\n{\"text\": \"ok too\"}\n";
  const fs::path out = scratch_ / "out";
  const Result run =
      run_anvil("prepare --input " + (scratch_ / "bad.jsonl").string() +
                " --on-error skip --tokenizer " + kTokenizer + " --out " + out.string());
  ASSERT_EQ(run.exit_code, 0) << run.output;
  EXPECT_NE(run.output.find("warning: [prepare] " + (scratch_ / "bad.jsonl").string() +
                            ":2: invalid JSON"),
            std::string::npos)
      << run.output;
  const nlohmann::json meta = read_meta(out);
  EXPECT_EQ(meta["documents"], 2);
  EXPECT_EQ(meta["bad_records_skipped"], 1);
}

}  // namespace
}  // namespace anvil
