// Benchmark tasks: the (context, continuation) pairs anvil builds equal those lm-evaluation-
// harness 0.4.13 builds for the same documents (tests/eval/golden/lm_eval_prompts.json, made
// by bench/make_eval_fixture.py with the harness's own task code); MMLU reads the same from CSV
// and JSON Lines; subjects outside MMLU's 57 get the same prompt, their own category and one
// warning; bad files fail with the file and line; and on the bigram model, whose
// log-likelihoods are known in closed form, every score and accuracy comes out as computed.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <map>

#include "eval/task_eval.h"
#include "eval/tasks.h"
#include "eval_test_util.h"
#include "scorer_test_util.h"

namespace anvil::test {
namespace {

nlohmann::json harness_fixture() {
  return nlohmann::json::parse(
      read_file(std::filesystem::path(ANVIL_HF_GOLDEN_DIR) / "lm_eval_prompts.json"));
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary) << text;
}

std::string json_lines(const nlohmann::json& docs) {
  std::string out;
  for (const nlohmann::json& doc : docs) out += doc.dump() + "\n";
  return out;
}

// RFC 4180: every field quoted, quotes doubled.
std::string mmlu_csv(const nlohmann::json& docs) {
  std::string out;
  const auto field = [](const std::string& text) {
    std::string quoted = "\"";
    for (const char c : text) quoted += c == '"' ? std::string("\"\"") : std::string(1, c);
    return quoted + "\"";
  };
  for (const nlohmann::json& doc : docs) {
    out += field(doc["question"].get<std::string>());
    for (const nlohmann::json& choice : doc["choices"]) out += "," + field(choice.get<std::string>());
    out += ",";
    out += static_cast<char>('A' + doc["answer"].get<int>());
    out += "\r\n";
  }
  return out;
}

void expect_harness_pairs(const nlohmann::json& entry, const std::vector<TaskDoc>& docs,
                          const std::string& label) {
  const nlohmann::json& want = entry["requests"];
  ASSERT_EQ(docs.size(), want.size()) << label;
  for (size_t d = 0; d < docs.size(); ++d) {
    EXPECT_EQ(docs[d].index, want[d]["doc"].get<int64_t>()) << label;
    EXPECT_EQ(docs[d].gold, want[d]["gold"].get<int>()) << label << " doc " << d;
    EXPECT_EQ(docs[d].choices, want[d]["choices"].get<std::vector<std::string>>())
        << label << " doc " << d;
    ASSERT_EQ(docs[d].pairs.size(), want[d]["pairs"].size()) << label << " doc " << d;
    for (size_t c = 0; c < docs[d].pairs.size(); ++c) {
      EXPECT_EQ(docs[d].pairs[c].first, want[d]["pairs"][c][0].get<std::string>())
          << label << " doc " << d << " choice " << c;
      EXPECT_EQ(docs[d].pairs[c].second, want[d]["pairs"][c][1].get<std::string>())
          << label << " doc " << d << " choice " << c;
    }
  }
}

TEST(Tasks, PairsEqualTheHarnessOnEveryTask) {
  const nlohmann::json fixture = harness_fixture();
  std::set<std::string> covered;
  for (const nlohmann::json& entry : fixture["tasks"]) {
    TempDir dir;
    const std::string task = entry["task"];
    covered.insert(task);
    TaskLoadOptions options;
    options.task = task;
    options.shots = entry["num_fewshot"];
    if (task == "mmlu") {
      const std::string subject = entry["subject"];
      write_text(dir / "csv" / "test" / (subject + "_test.csv"), mmlu_csv(entry["docs"]));
      write_text(dir / "csv" / "dev" / (subject + "_dev.csv"), mmlu_csv(entry["fewshot_docs"]));
      write_text(dir / "jsonl" / "test.jsonl", json_lines(entry["docs"]));
      write_text(dir / "jsonl" / "dev.jsonl", json_lines(entry["fewshot_docs"]));
      for (const char* layout : {"csv", "jsonl"}) {
        options.data = dir / layout;
        expect_harness_pairs(entry, load_task(options), task + " " + subject + " " + layout);
      }
    } else {
      options.data = dir / "docs.jsonl";
      write_text(options.data, json_lines(entry["docs"]));
      expect_harness_pairs(entry, load_task(options), task);
    }
  }
  for (const TaskInfo& task : known_tasks()) EXPECT_TRUE(covered.contains(task.name)) << task.name;
}

// The MMLU release and Python's csv module quote a field only when it needs it, so spaces
// around an unquoted field are part of it (professional_psychology's dev choices end in one).
TEST(Tasks, MmluCsvKeepsSpacesAroundUnquotedFields) {
  TempDir dir;
  const std::string question = "Which holds?,\" a \",b ,\tc, d,B\r\n";
  write_text(dir / "csv" / "dev" / "anatomy_dev.csv", question);
  write_text(dir / "csv" / "test" / "anatomy_test.csv", question);
  const nlohmann::json doc = {{"subject", "anatomy"}, {"question", "Which holds?"},
                              {"choices", {" a ", "b ", "\tc", " d"}}, {"answer", 1}};
  write_text(dir / "jsonl" / "dev.jsonl", doc.dump() + "\n");
  write_text(dir / "jsonl" / "test.jsonl", doc.dump() + "\n");
  const std::vector<TaskDoc> from_csv = load_task({"mmlu", dir / "csv", 1, 0});
  const std::vector<TaskDoc> from_jsonl = load_task({"mmlu", dir / "jsonl", 1, 0});
  ASSERT_EQ(from_csv.size(), 1u);
  ASSERT_EQ(from_jsonl.size(), 1u);
  EXPECT_EQ(from_csv[0].pairs, from_jsonl[0].pairs);
  EXPECT_NE(from_csv[0].pairs[0].first.find("\nB. b \nC. \tc\nD.  d\n"), std::string::npos)
      << from_csv[0].pairs[0].first;
}

// Returns the fixture's MMLU entry with the most few-shot examples.
nlohmann::json mmlu_fixture_entry() {
  const nlohmann::json fixture = harness_fixture();
  nlohmann::json best;
  for (const nlohmann::json& entry : fixture["tasks"]) {
    if (entry["task"] != "mmlu") continue;
    if (best.is_null() || entry["num_fewshot"] > best["num_fewshot"]) best = entry;
  }
  return best;
}

// Writes `entry`'s questions as subject `subject` in both layouts under `dir`/csv and
// `dir`/jsonl.
void write_mmlu_subject(const std::filesystem::path& dir, const nlohmann::json& entry,
                        const std::string& subject) {
  nlohmann::json docs = entry["docs"], shots = entry["fewshot_docs"];
  for (nlohmann::json* list : {&docs, &shots}) {
    for (nlohmann::json& doc : *list) doc["subject"] = subject;
  }
  write_text(dir / "csv" / "test" / (subject + "_test.csv"), mmlu_csv(docs));
  write_text(dir / "csv" / "dev" / (subject + "_dev.csv"), mmlu_csv(shots));
  std::ofstream(dir / "jsonl" / "test.jsonl", std::ios::app) << json_lines(docs);
  std::ofstream(dir / "jsonl" / "dev.jsonl", std::ios::app) << json_lines(shots);
}

// A subject outside MMLU's 57 gets the harness's MMLU prompt: its own name with spaces in the
// header, then the same shots and question as any subject.
TEST(Tasks, MmluSubjectsOutsideTheFiftySevenUseTheHarnessPrompt) {
  const nlohmann::json entry = mmlu_fixture_entry();
  const std::string subject = entry["subject"];
  const std::string header = "The following are multiple choice questions (with answers) about ";
  std::string spaced = subject;
  std::replace(spaced.begin(), spaced.end(), '_', ' ');
  nlohmann::json want = entry;
  for (nlohmann::json& request : want["requests"]) {
    for (nlohmann::json& pair : request["pairs"]) {
      std::string context = pair[0];
      ASSERT_TRUE(context.starts_with(header + spaced + ".\n\n")) << context;
      pair[0] = header + "tax law of 2024" + context.substr(header.size() + spaced.size());
    }
  }
  TempDir dir;
  std::filesystem::create_directories(dir / "jsonl");
  write_mmlu_subject(dir.path(), entry, "tax_law_of_2024");
  for (const char* layout : {"csv", "jsonl"}) {
    const std::vector<TaskDoc> docs =
        load_task({"mmlu", dir / layout, entry["num_fewshot"].get<int>(), 0});
    expect_harness_pairs(want, docs, layout);
    for (const TaskDoc& doc : docs) EXPECT_EQ(doc.subtask, "mmlu_tax_law_of_2024");
  }
}

// Subjects outside the 57 form the category "custom" beside the known subjects' categories,
// and reading them warns once, naming each of them and none of the known ones.
TEST(Tasks, MmluSubjectsOutsideTheFiftySevenAreTheirOwnCategory) {
  const nlohmann::json entry = mmlu_fixture_entry();
  const std::string known = entry["subject"];
  TempDir dir;
  std::filesystem::create_directories(dir / "jsonl");
  for (const char* subject : {"contract_law", "tax_law"}) {
    write_mmlu_subject(dir.path(), entry, subject);
  }
  write_mmlu_subject(dir.path(), entry, known);
  const TaskLoadOptions load{"mmlu", dir / "jsonl", entry["num_fewshot"].get<int>(), 0};
  ::testing::internal::CaptureStderr();
  const std::vector<TaskDoc> docs = load_task(load);
  const std::string warnings = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(std::count(warnings.begin(), warnings.end(), '\n'), 1) << warnings;
  EXPECT_NE(warnings.find("subjects not among MMLU's 57 (2 of 3): contract_law, tax_law;"),
            std::string::npos)
      << warnings;
  EXPECT_EQ(warnings.find(known), std::string::npos) << warnings;

  const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::load((golden_dir("llama3") / "tokenizer.json").string());
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(tokenizer->vocab_size(), 16, 512);
  ModelOptions options;
  options.max_batch = 4;
  options.max_seq = 64;
  const auto model =
      make_bigram_model(*backend, config, bigram_table(config.dim, config.vocab_size, 8), options);
  const TaskScores scores =
      evaluate_task(*model, *tokenizer, find_task("mmlu"), load.shots, docs, TaskEvalOptions{});
  int64_t custom_items = 0;
  double custom_correct = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    if (docs[d].subtask == "mmlu_" + known) continue;
    ++custom_items;
    custom_correct += scores.docs[d].acc ? 1 : 0;
  }
  ASSERT_EQ(custom_items, 2 * static_cast<int64_t>(entry["docs"].size()));
  std::map<std::string, ScoreGroup> categories;
  for (const ScoreGroup& group : scores.categories) categories[group.name] = group;
  ASSERT_EQ(categories.size(), 2u);
  ASSERT_TRUE(categories.contains("custom"));
  EXPECT_EQ(categories["custom"].items, custom_items);
  EXPECT_DOUBLE_EQ(categories["custom"].acc, custom_correct / static_cast<double>(custom_items));
  ASSERT_TRUE(categories.contains(mmlu_category(known)));
  EXPECT_EQ(categories[mmlu_category(known)].items, static_cast<int64_t>(entry["docs"].size()));
  const nlohmann::json summary = task_scores_json(scores);
  EXPECT_EQ(summary["categories"]["custom"]["items"], custom_items);
  EXPECT_NE(task_scores_table(scores).find("| category custom | "), std::string::npos);
}

TEST(Tasks, LimitKeepsTheFirstDocsOfEachSubtask) {
  const nlohmann::json fixture = harness_fixture();
  for (const nlohmann::json& entry : fixture["tasks"]) {
    if (entry["task"] != "mmlu" || entry["docs"].size() < 2) continue;
    TempDir dir;
    write_text(dir / "test.jsonl", json_lines(entry["docs"]));
    write_text(dir / "dev.jsonl", json_lines(entry["fewshot_docs"]));
    const std::vector<TaskDoc> docs = load_task({"mmlu", dir.path(), 0, 1});
    ASSERT_EQ(docs.size(), 1u);
    EXPECT_EQ(docs[0].index, 0);
    return;
  }
  FAIL() << "the fixture has no MMLU subject with two questions";
}

// Expects load_task to fail with a message containing every part of `parts`.
void expect_load_error(const TaskLoadOptions& options, std::vector<std::string> parts) {
  try {
    load_task(options);
    ADD_FAILURE() << "no error; expected " << parts[0];
  } catch (const Error& e) {
    for (const std::string& part : parts) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos)
          << "'" << e.what() << "' lacks '" << part << "'";
    }
  }
}

TEST(Tasks, BadFilesFailNamingTheFileAndLine) {
  TempDir dir;
  const std::string good = "\"q1\",a,b,c,d,A\n\"q2\",a,b,c,d,B\n";
  write_text(dir / "cols" / "dev" / "anatomy_dev.csv", good);
  write_text(dir / "cols" / "test" / "anatomy_test.csv", good + "\"q3\nspans two lines\",a,b,c,D\n");
  expect_load_error({"mmlu", dir / "cols", 1, 0},
                    {"anatomy_test.csv:3", "5 columns, expected 6"});
  write_text(dir / "answer" / "dev" / "anatomy_dev.csv", good);
  write_text(dir / "answer" / "test" / "anatomy_test.csv", good + "q3,a,b,c,d,E\n");
  expect_load_error({"mmlu", dir / "answer", 1, 0},
                    {"anatomy_test.csv:3", "'E', not one of A, B, C, D"});
  write_text(dir / "quote" / "dev" / "anatomy_dev.csv", good);
  write_text(dir / "quote" / "test" / "anatomy_test.csv", good + "\"q3\"x,a,b,c,d,A\n");
  expect_load_error({"mmlu", dir / "quote", 1, 0}, {"anatomy_test.csv:3", "malformed CSV"});
  write_text(dir / "shots" / "dev" / "anatomy_dev.csv", good);
  write_text(dir / "shots" / "test" / "anatomy_test.csv", good);
  expect_load_error({"mmlu", dir / "shots", 5, 0},
                    {"anatomy_test.csv", "2 dev questions, fewer than the 5 shots"});
  write_text(dir / "subject" / "dev.jsonl", R"({"subject": "", "question": "q", )"
                                           R"("choices": ["a", "b", "c", "d"], "answer": 0})" "\n");
  write_text(dir / "subject" / "test.jsonl", R"({"subject": "", "question": "q", )"
                                            R"("choices": ["a", "b", "c", "d"], "answer": 0})" "\n");
  expect_load_error({"mmlu", dir / "subject", 0, 0}, {"dev.jsonl:1", "field 'subject' is empty"});
  expect_load_error({"mmlu", dir / "missing", 0, 0}, {"missing", "not a directory"});

  write_text(dir / "piqa.jsonl", R"({"goal": "g", "sol1": "a", "sol2": "b", "label": 0})"
                                 "\n\n"
                                 R"({"goal": "g", "sol1": "a", "label": 1})"
                                 "\n");
  expect_load_error({"piqa", dir / "piqa.jsonl", -1, 0}, {"piqa.jsonl:3", "missing field 'sol2'"});
  write_text(dir / "boolq.jsonl", R"({"passage": "p", "question": "q", "label": 2})" "\n");
  expect_load_error({"boolq", dir / "boolq.jsonl", -1, 0},
                    {"boolq.jsonl:1", "field 'label' is 2, not an answer in 0..1"});
  write_text(dir / "arc.jsonl",
             R"({"question": "q", "choices": {"text": ["x", "y"], "label": ["A", "B"]}, "answerKey": "C"})"
             "\n");
  expect_load_error({"arc_easy", dir / "arc.jsonl", -1, 0},
                    {"arc.jsonl:1", "answerKey 'C' is not one of the labels"});
  write_text(dir / "broken.jsonl", "{\"goal\": \n");
  expect_load_error({"piqa", dir / "broken.jsonl", -1, 0}, {"broken.jsonl:1", "not a JSON object"});
  expect_load_error({"piqa", dir / "none.jsonl", -1, 0}, {"none.jsonl", "no such file"});
  expect_load_error({"hellaswag", dir / "piqa.jsonl", 3, 0}, {"--shots applies to mmlu only"});
  expect_load_error({"mmlu_pro", dir.path(), -1, 0}, {"unknown task 'mmlu_pro'", "hellaswag"});
}

TEST(Tasks, BigramModelScoresEveryDocAsComputed) {
  const std::unique_ptr<Tokenizer> tokenizer =
      Tokenizer::load((golden_dir("llama3") / "tokenizer.json").string());
  const nlohmann::json fixture = harness_fixture();
  auto backend = make_backend("cpu");
  const LlamaConfig config = scorer_config(tokenizer->vocab_size(), 16, 512);
  const std::vector<float> table = bigram_table(config.dim, config.vocab_size, 8);
  ModelOptions options;
  options.max_batch = 4;
  options.max_seq = 64;
  const auto model = make_bigram_model(*backend, config, table, options);
  for (const nlohmann::json& entry : fixture["tasks"]) {
    TempDir dir;
    const std::string task = entry["task"];
    TaskLoadOptions load{task, dir / "docs.jsonl", entry["num_fewshot"], 0};
    if (task == "mmlu") {
      load.data = dir.path();
      write_text(dir / "test.jsonl", json_lines(entry["docs"]));
      write_text(dir / "dev.jsonl", json_lines(entry["fewshot_docs"]));
    } else {
      write_text(load.data, json_lines(entry["docs"]));
    }
    const std::vector<TaskDoc> docs = load_task(load);
    const TaskInfo& info = find_task(task);
    const TaskScores scores =
        evaluate_task(*model, *tokenizer, info, load.shots, docs, TaskEvalOptions{3, 0, {}});
    double acc_sum = 0;
    for (size_t d = 0; d < docs.size(); ++d) {
      std::vector<double> want;
      for (const auto& [context_text, continuation_text] : docs[d].pairs) {
        // The harness's split: trailing context whitespace moves to the continuation.
        const std::string context = python_rstrip(context_text);
        const std::string continuation = context_text.substr(context.size()) + continuation_text;
        const std::vector<int32_t> ctx = tokenizer->encode(context, true);
        const std::vector<int32_t> whole = tokenizer->encode(context + continuation, true);
        double ll = 0;
        for (size_t i = ctx.size(); i < whole.size(); ++i) {
          ll += bigram_logprob(config, table, whole[i - 1], whole[i]);
        }
        want.push_back(ll);
      }
      ASSERT_EQ(scores.docs[d].loglikelihoods.size(), want.size());
      for (size_t c = 0; c < want.size(); ++c) {
        EXPECT_NEAR(scores.docs[d].loglikelihoods[c], want[c], 1e-4) << task << " doc " << d;
      }
      const int pred = static_cast<int>(std::max_element(want.begin(), want.end()) - want.begin());
      EXPECT_EQ(scores.docs[d].acc, pred == docs[d].gold) << task << " doc " << d;
      acc_sum += pred == docs[d].gold;
    }
    EXPECT_NEAR(scores.overall.acc, acc_sum / static_cast<double>(docs.size()), 1e-12) << task;
    EXPECT_EQ(scores.overall.items, static_cast<int64_t>(docs.size()));
  }
}

}  // namespace
}  // namespace anvil::test
