// `anvil prepare --sft` as a library call with the llama3_like / qwen2_like fixture tokenizers:
// shards hold exactly the rendered examples (tokens and masks) in split order, splits are
// fixed by the seed, bad records fail with file:line and nothing written (or are skipped and
// counted), padding fills whole windows, and the existing DataLoader reads the result with
// loss masks that line up with the targets.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/shard_reader.h"
#include "data/sft.h"
#include "data_test_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil {
namespace {

namespace fs = std::filesystem;
using testing::expect_error;
using testing::read_bytes;
using testing::TempDir;

const Tokenizer& fixture_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot)
    slot = Tokenizer::load(std::string(ANVIL_TEST_DATA) + "/tokenizer/fixtures/" + name +
                           ".tokenizer.json");
  return *slot;
}

// Returns conversation i of a small synthetic instruction set (chat form for even i, alpaca
// form for odd i), as messages and as its JSONL line.
std::vector<ChatMessage> conversation(int i) {
  const std::string n = std::to_string(i);
  const std::string words(static_cast<size_t>(i % 7) * 6, 'x');
  if (i % 2 == 1)
    return {{"user", "Repeat " + n + "\n\n" + words}, {"assistant", "Number " + n + " " + words}};
  std::vector<ChatMessage> m = {{"system", "Count."}, {"user", "After " + n + "?"},
                                {"assistant", std::to_string(i + 1) + "."}};
  if (i % 4 == 0) {
    m.push_back({"user", "And then?"});
    m.push_back({"assistant", std::to_string(i + 2) + " " + words});
  }
  return m;
}

std::string jsonl_line(int i) {
  const std::vector<ChatMessage> m = conversation(i);
  nlohmann::json record;
  if (i % 2 == 1) {
    const std::string user = m[0].content;
    const size_t cut = user.find("\n\n");
    record = {{"instruction", user.substr(0, cut)}, {"input", user.substr(cut + 2)},
              {"output", m[1].content}};
  } else {
    record["messages"] = nlohmann::json::array();
    for (const ChatMessage& message : m)
      record["messages"].push_back({{"role", message.role}, {"content", message.content}});
  }
  return record.dump();
}

std::string write_jsonl(const TempDir& dir, int count, const std::string& name = "chat.jsonl") {
  const std::string path = dir.file(name);
  std::ofstream out(path);
  for (int i = 0; i < count; ++i) out << jsonl_line(i) << "\n";
  return path;
}

// Reads every document (tokens and mask) of a split in order.
std::vector<RenderedChat> split_documents(const std::string& dir, const std::string& split) {
  std::vector<RenderedChat> docs;
  for (int part = 0; fs::exists(dir + "/" + shard_file_name(split, part)); ++part) {
    ShardReader reader(dir + "/" + shard_file_name(split, part));
    EXPECT_TRUE(reader.has_loss_mask());
    std::vector<int32_t> tokens(reader.token_count());
    reader.read_tokens(0, tokens.size(), tokens.data());
    const auto offsets = reader.doc_offsets();
    const auto mask = reader.loss_mask();
    for (size_t d = 0; d < offsets.size(); ++d) {
      const size_t end = d + 1 < offsets.size() ? offsets[d + 1] : tokens.size();
      docs.push_back({{tokens.begin() + offsets[d], tokens.begin() + end},
                      {mask.begin() + offsets[d], mask.begin() + end}});
    }
  }
  return docs;
}

SftPrepareOptions options_for(const std::string& input, const std::string& out) {
  SftPrepareOptions options;
  options.inputs = {input};
  options.out_dir = out;
  options.split_ratios = {0.7, 0.2, 0.1};
  options.seed = 11;
  options.show_progress = false;
  return options;
}

TEST(SftPrepare, PackedShardsHoldRenderedExamplesInSplitOrder) {
  TempDir dir;
  const int count = 60;
  const std::string out = dir.file("sft");
  SftPrepareOptions options = options_for(write_jsonl(dir, count), out);
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  const SftPrepareSummary summary = prepare_sft_dataset(options, tok);
  EXPECT_EQ(summary.chat_template, ChatTemplate::llama3);
  EXPECT_EQ(summary.examples, static_cast<uint64_t>(count));
  EXPECT_EQ(summary.padding_tokens, 0u);

  std::array<std::vector<RenderedChat>, 3> expected;
  uint64_t tokens = 0;
  uint64_t loss_tokens = 0;
  for (int i = 0; i < count; ++i) {
    RenderedChat r = render_chat(ChatTemplate::llama3, tok, conversation(i), false);
    EXPECT_EQ(r.tokens.front(), *tok.bos_id());
    tokens += r.tokens.size();
    for (uint8_t bit : r.loss_mask) loss_tokens += bit;
    expected[split_of_document(i, options.seed, options.split_ratios)].push_back(std::move(r));
  }
  EXPECT_EQ(summary.tokens, tokens);
  EXPECT_EQ(summary.loss_tokens, loss_tokens);
  for (size_t s = 0; s < 3; ++s) {
    const std::vector<RenderedChat> docs = split_documents(out, kSplitNames[s]);
    ASSERT_EQ(docs.size(), expected[s].size()) << kSplitNames[s];
    EXPECT_GT(docs.size(), 0u) << kSplitNames[s];
    for (size_t d = 0; d < docs.size(); ++d) {
      EXPECT_EQ(docs[d].tokens, expected[s][d].tokens) << kSplitNames[s] << " doc " << d;
      EXPECT_EQ(docs[d].loss_mask, expected[s][d].loss_mask) << kSplitNames[s] << " doc " << d;
    }
  }
  std::ifstream meta_in(out + "/meta.json");
  const nlohmann::json meta = nlohmann::json::parse(meta_in);
  EXPECT_EQ(meta.at("sft").at("chat_template"), "llama3");
  EXPECT_EQ(meta.at("sft").at("packing"), true);
  EXPECT_EQ(meta.at("sft").at("loss_tokens"), loss_tokens);
  EXPECT_EQ(meta.at("documents"), count);
  EXPECT_EQ(meta.at("tokenizer").at("fingerprint"), tok.fingerprint());
}

TEST(SftPrepare, SplitIsFixedBySeedAndTemplateDefaultsFromTokenizer) {
  TempDir dir;
  const std::string input = write_jsonl(dir, 40);
  const Tokenizer& tok = fixture_tokenizer("qwen2_like");
  SftPrepareOptions first = options_for(input, dir.file("a"));
  SftPrepareOptions second = options_for(input, dir.file("b"));
  SftPrepareOptions reseeded = options_for(input, dir.file("c"));
  reseeded.seed = 12;
  EXPECT_EQ(prepare_sft_dataset(first, tok).chat_template, ChatTemplate::chatml);
  prepare_sft_dataset(second, tok);
  prepare_sft_dataset(reseeded, tok);
  for (const char* split : kSplitNames)
    EXPECT_EQ(read_bytes(dir.file("a/") + shard_file_name(split, 0)),
              read_bytes(dir.file("b/") + shard_file_name(split, 0)));
  EXPECT_NE(read_bytes(dir.file("a/train-00000.tok")), read_bytes(dir.file("c/train-00000.tok")));
  std::ifstream meta_in(dir.file("a/meta.json"));
  EXPECT_EQ(nlohmann::json::parse(meta_in).at("sft").at("chat_template"), "chatml");
}

TEST(SftPrepare, BadRecordsFailWithFileLineOrAreSkipped) {
  TempDir dir;
  const std::string input = dir.file("mixed.jsonl");
  std::ofstream(input) << jsonl_line(1) << "\n"
                       << jsonl_line(2) << "\n"
                       << R"({"messages": [{"role": "user", "content": "hi"}, )"
                       << R"({"role": "assistant", "content": ""}]})" << "\n"
                       << jsonl_line(3) << "\n"
                       << R"({"messages": [{"role": "user", "content": ")"
                       << std::string(400, 'z') << R"("}, {"role": "assistant", "content": "ok"}]})"
                       << "\n";
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  SftPrepareOptions options = options_for(input, dir.file("out"));
  options.max_tokens = 64;
  expect_error([&] { prepare_sft_dataset(options, tok); },
               {"[sft] " + input + ":3: message 2: empty assistant content"});
  EXPECT_FALSE(fs::exists(dir.file("out")));
  std::ofstream(dir.file("long.jsonl")) << jsonl_line(1) << "\n"
                                        << R"({"instruction": ")" << std::string(400, 'z')
                                        << R"(", "output": "ok"})" << "\n";
  options.inputs = {dir.file("long.jsonl")};
  expect_error([&] { prepare_sft_dataset(options, tok); },
               {dir.file("long.jsonl") + ":2: over-long example", "> --max-tokens 64"});
  EXPECT_FALSE(fs::exists(dir.file("out")));

  // The first bad record by line is reported, whether it fails parsing or rendering.
  std::ofstream(dir.file("order.jsonl")) << R"({"instruction": ")" << std::string(400, 'z')
                                         << R"(", "output": "ok"})" << "\n"
                                         << "{broken\n";
  options.inputs = {dir.file("order.jsonl")};
  expect_error([&] { prepare_sft_dataset(options, tok); },
               {dir.file("order.jsonl") + ":1: over-long example"});
  options.inputs = {dir.file("llama2.jsonl")};
  std::ofstream(options.inputs[0]) << R"({"messages": [{"role": "assistant", "content": "a"}]})";
  options.chat_template = ChatTemplate::llama2;
  expect_error([&] { prepare_sft_dataset(options, fixture_tokenizer("sp_like")); },
               {"llama2.jsonl:1: message 1: template llama2 needs user and assistant turns"});
  options.chat_template.reset();
  EXPECT_FALSE(fs::exists(dir.file("out")));

  options.inputs = {input};
  options.on_error = SftOnError::skip;
  const SftPrepareSummary summary = prepare_sft_dataset(options, tok);
  EXPECT_EQ(summary.skipped_records, 2u);
  EXPECT_EQ(summary.examples, 3u);
  EXPECT_TRUE(fs::exists(dir.file("out/meta.json")));
}

TEST(SftPrepare, RejectsNonJsonlInputsAndPaddingWithoutSeqLen) {
  TempDir dir;
  std::ofstream(dir.file("notes.txt")) << "hello\n";
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  SftPrepareOptions options = options_for(dir.file("notes.txt"), dir.file("out"));
  expect_error([&] { prepare_sft_dataset(options, tok); }, {"notes.txt", ".jsonl"});
  options.inputs = {write_jsonl(dir, 4)};
  options.packing = false;
  expect_error([&] { prepare_sft_dataset(options, tok); }, {"--seq-len"});
  EXPECT_FALSE(fs::exists(dir.file("out")));
}

struct Window {
  std::vector<int32_t> tokens, targets, doc_ids;
  std::vector<float> loss_mask;
};

Window read_window(DataLoader& loader, int64_t sample) {
  const int seq_len = loader.seq_len();
  Window w{std::vector<int32_t>(seq_len), std::vector<int32_t>(seq_len),
           std::vector<int32_t>(seq_len), std::vector<float>(seq_len)};
  const Shape shape{1, seq_len};
  const Tensor tokens(w.tokens.data(), DType::i32, shape);
  const Tensor targets(w.targets.data(), DType::i32, shape);
  const Tensor doc_ids(w.doc_ids.data(), DType::i32, shape);
  const Tensor loss_mask(w.loss_mask.data(), DType::f32, shape);
  loader.fill(sample, 1, tokens, targets, &doc_ids, &loss_mask);
  return w;
}

// Concatenates the renderings of the examples that went to `split`.
RenderedChat expected_stream(const Tokenizer& tok, int count, const SftPrepareOptions& options,
                             int split) {
  RenderedChat stream;
  for (int i = 0; i < count; ++i) {
    if (split_of_document(i, options.seed, options.split_ratios) != split) continue;
    const RenderedChat r = render_chat(ChatTemplate::llama3, tok, conversation(i), false);
    stream.tokens.insert(stream.tokens.end(), r.tokens.begin(), r.tokens.end());
    stream.loss_mask.insert(stream.loss_mask.end(), r.loss_mask.begin(), r.loss_mask.end());
  }
  return stream;
}

TEST(SftPrepare, DataLoaderMasksLineUpWithTargetsWhenPacked) {
  TempDir dir;
  const int count = 50;
  SftPrepareOptions options = options_for(write_jsonl(dir, count), dir.file("sft"));
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  prepare_sft_dataset(options, tok);
  const RenderedChat stream = expected_stream(tok, count, options, 0);
  const int seq_len = 24;
  DataLoader loader(dir.file("sft"), "train", seq_len, 0, /*shuffle=*/false);
  ASSERT_EQ(loader.windows_per_epoch(), static_cast<int64_t>((stream.tokens.size() - 1) / seq_len));
  const int32_t bos = *tok.bos_id();
  int64_t trained = 0;
  for (int64_t w = 0; w < loader.windows_per_epoch(); ++w) {
    const Window window = read_window(loader, w);
    const size_t start = static_cast<size_t>(w) * seq_len;
    for (int j = 0; j < seq_len; ++j) {
      ASSERT_EQ(window.tokens[j], stream.tokens[start + j]);
      ASSERT_EQ(window.targets[j], stream.tokens[start + j + 1]);
      ASSERT_EQ(window.loss_mask[j], static_cast<float>(stream.loss_mask[start + j + 1]))
          << "window " << w << " position " << j;
      // Every example starts with BOS, so a new document id begins exactly at each BOS.
      if (j > 0) {
        ASSERT_EQ(window.doc_ids[j] - window.doc_ids[j - 1], window.tokens[j] == bos ? 1 : 0);
      }
      trained += window.loss_mask[j] > 0;
    }
  }
  EXPECT_GT(trained, 0);
}

TEST(SftPrepare, PaddingKeepsEveryWindowInsideOneExample) {
  TempDir dir;
  const int count = 30;
  const int seq_len = 16;
  SftPrepareOptions options = options_for(write_jsonl(dir, count), dir.file("sft"));
  options.packing = false;
  options.seq_len = seq_len;
  const Tokenizer& tok = fixture_tokenizer("llama3_like");
  const SftPrepareSummary summary = prepare_sft_dataset(options, tok);
  EXPECT_GT(summary.padding_tokens, 0u);
  const int32_t pad = *tok.eos_id();

  for (int split = 0; split < 3; ++split) {
    const std::vector<RenderedChat> docs = split_documents(dir.file("sft"), kSplitNames[split]);
    const RenderedChat stream = expected_stream(tok, count, options, split);
    size_t consumed = 0;
    uint64_t doc_tokens = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      const bool last = d + 1 == docs.size();
      EXPECT_EQ(docs[d].tokens.size() % seq_len, last ? 1u : 0u) << "doc " << d;
      // The rendered example, then mask-0 pad tokens.
      size_t length = 0;
      while (consumed + length < stream.tokens.size() && length < docs[d].tokens.size() &&
             (length == 0 || stream.tokens[consumed + length] != *tok.bos_id()))
        ++length;
      for (size_t i = 0; i < docs[d].tokens.size(); ++i) {
        if (i < length) {
          EXPECT_EQ(docs[d].tokens[i], stream.tokens[consumed + i]);
          EXPECT_EQ(docs[d].loss_mask[i], stream.loss_mask[consumed + i]);
        } else {
          EXPECT_EQ(docs[d].tokens[i], pad);
          EXPECT_EQ(docs[d].loss_mask[i], 0);
        }
      }
      EXPECT_LT(docs[d].tokens.size() - length, static_cast<size_t>(seq_len) + (last ? 1 : 0));
      consumed += length;
      doc_tokens += docs[d].tokens.size();
    }
    EXPECT_EQ(consumed, stream.tokens.size());
    EXPECT_EQ(doc_tokens, summary.splits[split].tokens);
  }

  DataLoader loader(dir.file("sft"), "train", seq_len, 0, /*shuffle=*/false);
  const std::vector<RenderedChat> docs = split_documents(dir.file("sft"), "train");
  ASSERT_EQ(loader.windows_per_epoch() * seq_len + 1, static_cast<int64_t>(loader.token_count()));
  int64_t window = 0;
  for (const RenderedChat& doc : docs) {
    for (size_t first = 0; first + seq_len <= doc.tokens.size(); first += seq_len, ++window) {
      const Window w = read_window(loader, window);
      for (int j = 0; j < seq_len; ++j) {
        ASSERT_EQ(w.doc_ids[j], 0) << "window " << window << " mixes examples";
        ASSERT_EQ(w.tokens[j], doc.tokens[first + j]);
        const bool inside = first + j + 1 < doc.tokens.size();
        ASSERT_EQ(w.loss_mask[j], inside ? static_cast<float>(doc.loss_mask[first + j + 1]) : 0.f)
            << "window " << window << " position " << j;
        if (inside) {
          ASSERT_EQ(w.targets[j], doc.tokens[first + j + 1]);
        }
      }
    }
  }
  EXPECT_EQ(window, loader.windows_per_epoch());
}

}  // namespace
}  // namespace anvil
