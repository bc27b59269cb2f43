// Task prompts as lm-evaluation-harness builds them (see tasks.h): the templates of its
// default task YAMLs, its few-shot layout (description, then each shot as question + target
// delimiter " " + answer + few-shot delimiter "\n\n", then the question) and its Python string
// functions, reproduced here on UTF-8.
#include "eval/tasks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "core/log.h"
#include "eval/task_files.h"
#include "tokenizer/utf8.h"

namespace anvil {
namespace {

// MMLU's 57 subjects and their categories (the harness's mmlu_<subject>.yaml tags).
const std::map<std::string, std::string>& mmlu_subjects() {
  static const std::map<std::string, std::string> subjects = [] {
    std::map<std::string, std::string> m;
    const auto add = [&m](const char* category, std::initializer_list<const char*> names) {
      for (const char* name : names) m[name] = category;
    };
    add("stem", {"abstract_algebra", "anatomy", "astronomy", "college_biology",
                 "college_chemistry", "college_computer_science", "college_mathematics",
                 "college_physics", "computer_security", "conceptual_physics",
                 "electrical_engineering", "elementary_mathematics", "high_school_biology",
                 "high_school_chemistry", "high_school_computer_science",
                 "high_school_mathematics", "high_school_physics", "high_school_statistics",
                 "machine_learning"});
    add("other", {"business_ethics", "clinical_knowledge", "college_medicine", "global_facts",
                  "human_aging", "management", "marketing", "medical_genetics", "miscellaneous",
                  "nutrition", "professional_accounting", "professional_medicine", "virology"});
    add("social_sciences",
        {"econometrics", "high_school_geography", "high_school_government_and_politics",
         "high_school_macroeconomics", "high_school_microeconomics", "high_school_psychology",
         "human_sexuality", "professional_psychology", "public_relations", "security_studies",
         "sociology", "us_foreign_policy"});
    add("humanities", {"formal_logic", "high_school_european_history", "high_school_us_history",
                       "high_school_world_history", "international_law", "jurisprudence",
                       "logical_fallacies", "moral_disputes", "moral_scenarios", "philosophy",
                       "prehistory", "professional_law", "world_religions"});
    return m;
  }();
  return subjects;
}

// Decodes the code point at text[i] (UTF-8; invalid bytes stand for themselves), returning its
// byte length in `length`.
char32_t code_point_at(const std::string& text, size_t i, size_t& length) {
  const auto b = static_cast<unsigned char>(text[i]);
  const size_t need = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 1;
  if (need == 1 || i + need > text.size()) {
    length = 1;
    return b;
  }
  char32_t cp = need == 2 ? (b & 0x1F) : need == 3 ? (b & 0x0F) : (b & 0x07);
  for (size_t k = 1; k < need; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text[i + k]) & 0x3F);
  length = need;
  return cp;
}

// Case mapping of Python's str.upper()/lower() for ASCII, Latin-1 and Latin Extended-A, the
// letters benchmark text uses; other code points are left as they are.
char32_t to_upper(char32_t c) {
  if (c >= 'a' && c <= 'z') return c - 32;
  if (c == 0xFF) return 0x178;
  if (c >= 0xE0 && c <= 0xFE && c != 0xF7) return c - 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    const bool odd_is_lower = !((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E));
    return odd_is_lower ? (c % 2 == 1 ? c - 1 : c) : (c % 2 == 0 ? c - 1 : c);
  }
  return c;
}

char32_t to_lower(char32_t c) {
  if (c >= 'A' && c <= 'Z') return c + 32;
  if (c == 0x178) return 0xFF;
  if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
  if (c >= 0x100 && c <= 0x17F && c != 0x130 && c != 0x131 && c != 0x138 && c != 0x149 &&
      c != 0x17F) {
    const bool odd_is_lower = !((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E));
    return odd_is_lower ? (c % 2 == 0 ? c + 1 : c) : (c % 2 == 1 ? c + 1 : c);
  }
  return c;
}

// Python's str.capitalize(): the first character upper-cased, the rest lower-cased.
std::string python_capitalize(const std::string& text) {
  std::string out;
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    const char32_t c = code_point_at(text, i, n);
    if (n == 1 && c >= 0x80) {
      out.push_back(text[i]);  // an invalid byte stays as it is
      continue;
    }
    tok::utf8_append(out, i == 0 ? to_upper(c) : to_lower(c));
  }
  return out;
}

// Python's str.replace(old, new): every non-overlapping occurrence, left to right.
std::string replace_all(const std::string& text, const std::string& from, const std::string& to) {
  std::string out;
  size_t start = 0;
  for (size_t at; (at = text.find(from, start)) != std::string::npos; start = at + from.size()) {
    out.append(text, start, at - start).append(to);
  }
  return out.append(text, start, std::string::npos);
}

// re.sub(r"\[.*?\]", "", text): drops each shortest bracketed span on one line.
std::string drop_bracketed(const std::string& text) {
  std::string out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '[') {
      const size_t close = text.find_first_of("]\n", i + 1);
      if (close != std::string::npos && text[close] == ']') {
        i = close;
        continue;
      }
    }
    out.push_back(text[i]);
  }
  return out;
}

// HellaSwag's preprocess (lm_eval/tasks/hellaswag/utils.py).
std::string hellaswag_preprocess(const std::string& text) {
  std::string out = replace_all(python_strip(text), " [title]", ". ");
  return replace_all(drop_bracketed(out), "  ", " ");
}

TaskDoc choice_doc(const std::string& subtask, int64_t index, const std::string& context,
                   std::vector<std::string> choices, int gold) {
  TaskDoc doc{subtask, index, {}, std::move(choices), gold};
  for (const std::string& choice : doc.choices) doc.pairs.emplace_back(context, " " + choice);
  return doc;
}

std::string mmlu_question(const TaskRecord& record) {
  const std::vector<std::string> choices = record.texts("choices");
  ANVIL_CHECK(choices.size() == 4, "[eval] {}: 'choices' has {} entries, MMLU needs 4",
              record.where(), choices.size());
  return fmt::format("{}\nA. {}\nB. {}\nC. {}\nD. {}\nAnswer:", python_strip(record.text("question")),
                     choices[0], choices[1], choices[2], choices[3]);
}

// The MMLU files: per subject its dev and test records.
struct MmluSubject {
  std::vector<TaskRecord> dev;
  std::vector<TaskRecord> test;
};

std::map<std::string, MmluSubject> read_mmlu(const std::filesystem::path& dir, int shots,
                                             int64_t limit, uint64_t max_record_bytes,
                                             bool warn) {
  namespace fs = std::filesystem;
  std::map<std::string, MmluSubject> subjects;
  ANVIL_CHECK(fs::is_directory(dir),
              "[eval] {}: not a directory; MMLU data is a folder with dev/ and test/ CSV files "
              "or dev.jsonl and test.jsonl",
              dir.string());
  if (fs::is_directory(dir / "test")) {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir / "test")) {
      const std::string name = entry.path().filename().string();
      const std::string suffix = "_test.csv";
      if (name.size() <= suffix.size() || !name.ends_with(suffix)) continue;
      const std::string subject = name.substr(0, name.size() - suffix.size());
      const fs::path dev = dir / "dev" / (subject + "_dev.csv");
      ANVIL_CHECK(fs::exists(dev), "[eval] {}: missing, the dev questions of {}", dev.string(),
                  entry.path().string());
      subjects[subject] = {read_mmlu_csv(dev, shots, max_record_bytes),
                           read_mmlu_csv(entry.path(), limit, max_record_bytes)};
    }
  } else {
    ANVIL_CHECK(fs::exists(dir / "test.jsonl") && fs::exists(dir / "dev.jsonl"),
                "[eval] {}: no test/ folder of CSV files and no test.jsonl + dev.jsonl",
                dir.string());
    for (const auto& [split, file] : {std::pair{0, "dev.jsonl"}, std::pair{1, "test.jsonl"}}) {
      for (TaskRecord& record : read_json_lines(dir / file, 0, max_record_bytes)) {
        const std::string name = record.text("subject");
        ANVIL_CHECK(!name.empty(), "[eval] {}: field 'subject' is empty", record.where());
        MmluSubject& subject = subjects[name];
        std::vector<TaskRecord>& records = split == 0 ? subject.dev : subject.test;
        if (limit > 0 && split == 1 && static_cast<int64_t>(records.size()) >= limit) continue;
        records.push_back(std::move(record));
      }
    }
  }
  ANVIL_CHECK(!subjects.empty(), "[eval] {}: no MMLU test questions found", dir.string());
  std::vector<std::string> unknown;
  for (const auto& [name, subject] : subjects) {
    const std::string where = subject.test.empty() ? dir.string() : subject.test[0].file.string();
    ANVIL_CHECK(static_cast<int>(subject.dev.size()) >= shots,
                "[eval] {}: subject {} has {} dev questions, fewer than the {} shots asked for",
                where, name, subject.dev.size(), shots);
    if (!mmlu_subjects().contains(name)) unknown.push_back(name);
  }
  if (warn && !unknown.empty()) {
    log_warn("[eval] {}: subjects not among MMLU's 57 ({} of {}): {}; scored with MMLU's "
             "prompt, reported as the category '{}'",
             dir.string(), unknown.size(), subjects.size(), fmt::join(unknown, ", "),
             kMmluCustomCategory);
  }
  return subjects;
}

std::vector<TaskDoc> load_mmlu(const TaskLoadOptions& options, int shots) {
  std::vector<TaskDoc> docs;
  for (const auto& [subject, records] :
       read_mmlu(options.data, shots, options.limit, options.max_record_bytes, options.warn)) {
    // The harness's description (its _generate_configs.py joins the subject's words with
    // spaces, the rule any subject follows here), then the first `shots` dev questions with
    // their answers.
    std::string prefix = fmt::format("The following are multiple choice questions (with answers) "
                                     "about {}.\n\n",
                                     replace_all(subject, "_", " "));
    for (int s = 0; s < shots; ++s) {
      const TaskRecord& shot = records.dev[static_cast<size_t>(s)];
      prefix += mmlu_question(shot) + " " + static_cast<char>('A' + shot.index("answer", 4, true)) +
                "\n\n";
    }
    for (size_t i = 0; i < records.test.size(); ++i) {
      const TaskRecord& record = records.test[i];
      docs.push_back(choice_doc("mmlu_" + subject, static_cast<int64_t>(i),
                                prefix + mmlu_question(record), {"A", "B", "C", "D"},
                                record.index("answer", 4, true)));
    }
  }
  return docs;
}

TaskDoc hellaswag_doc(const TaskRecord& r, int64_t index) {
  const std::string context = r.text("activity_label") + ": " + r.text("ctx_a") + " " +
                              python_capitalize(r.text("ctx_b"));
  std::vector<std::string> endings;
  for (const std::string& ending : r.texts("endings")) endings.push_back(hellaswag_preprocess(ending));
  const int gold = r.index("label", static_cast<int>(endings.size()));
  return choice_doc("hellaswag", index, hellaswag_preprocess(context), std::move(endings), gold);
}

TaskDoc arc_doc(const std::string& task, const TaskRecord& r, int64_t index) {
  const nlohmann::json& choices = r.field("choices");
  ANVIL_CHECK(choices.is_object() && choices.contains("text") && choices.contains("label"),
              "[eval] {}: 'choices' must be an object with 'text' and 'label' lists", r.where());
  TaskRecord inner{choices, r.file, r.line};
  std::vector<std::string> texts = inner.texts("text");
  const std::vector<std::string> labels = inner.texts("label");
  ANVIL_CHECK(labels.size() == texts.size(), "[eval] {}: {} choice texts but {} labels",
              r.where(), texts.size(), labels.size());
  const std::string key = r.text("answerKey");
  const auto found = std::find(labels.begin(), labels.end(), key);
  ANVIL_CHECK(found != labels.end(), "[eval] {}: answerKey '{}' is not one of the labels",
              r.where(), key);
  return choice_doc(task, index, "Question: " + r.text("question") + "\nAnswer:", std::move(texts),
                    static_cast<int>(found - labels.begin()));
}

TaskDoc winogrande_doc(const TaskRecord& r, int64_t index) {
  const std::string sentence = r.text("sentence");
  const size_t blank = sentence.find('_');
  ANVIL_CHECK(blank != std::string::npos, "[eval] {}: the sentence has no blank '_'", r.where());
  const std::string rest = " " + python_strip(sentence.substr(blank + 1));
  const int gold = r.index("answer", 3) - 1;
  ANVIL_CHECK(gold >= 0, "[eval] {}: field 'answer' must be \"1\" or \"2\"", r.where());
  TaskDoc doc{"winogrande", index, {}, {}, gold};
  for (const char* option : {"option1", "option2"}) {
    doc.choices.push_back(sentence.substr(0, blank) + r.text(option));
    doc.pairs.emplace_back(doc.choices.back(), rest);
  }
  return doc;
}

}  // namespace

const std::vector<TaskInfo>& known_tasks() {
  static const std::vector<TaskInfo> tasks = {
      {"mmlu", "test", 5, false, "folder: dev/ and test/ CSV files per subject, or dev.jsonl + test.jsonl"},
      {"hellaswag", "validation", 0, true, "JSON Lines: activity_label, ctx_a, ctx_b, endings, label"},
      {"arc_easy", "test", 0, true, "JSON Lines: question, choices {text, label}, answerKey"},
      {"arc_challenge", "test", 0, true, "JSON Lines: question, choices {text, label}, answerKey"},
      {"piqa", "validation", 0, true, "JSON Lines: goal, sol1, sol2, label"},
      {"winogrande", "validation", 0, false, "JSON Lines: sentence, option1, option2, answer"},
      {"boolq", "validation", 0, false, "JSON Lines: passage, question, label"},
  };
  return tasks;
}

const TaskInfo& find_task(const std::string& name) {
  std::string names;
  for (const TaskInfo& task : known_tasks()) {
    if (task.name == name) return task;
    names += (names.empty() ? "" : ", ") + task.name;
  }
  ANVIL_FAIL("[eval] unknown task '{}'; the tasks are {}", name, names);
}

std::vector<TaskDoc> load_task(const TaskLoadOptions& options) {
  const TaskInfo& task = find_task(options.task);
  const int shots = options.shots >= 0 ? options.shots : task.default_shots;
  ANVIL_CHECK(task.name == "mmlu" || shots == 0,
              "[eval] --shots applies to mmlu only: the harness runs {} 0-shot", task.name);
  if (task.name == "mmlu") return load_mmlu(options, shots);
  ANVIL_CHECK(std::filesystem::is_regular_file(options.data),
              "[eval] {}: no such file; {} reads {}", options.data.string(), task.name,
              task.data_layout);
  std::vector<TaskDoc> docs;
  const std::vector<TaskRecord> records =
      read_json_lines(options.data, options.limit, options.max_record_bytes);
  for (size_t i = 0; i < records.size(); ++i) {
    const TaskRecord& r = records[i];
    const auto index = static_cast<int64_t>(i);
    if (task.name == "hellaswag") {
      docs.push_back(hellaswag_doc(r, index));
    } else if (task.name == "arc_easy" || task.name == "arc_challenge") {
      docs.push_back(arc_doc(task.name, r, index));
    } else if (task.name == "piqa") {
      docs.push_back(choice_doc("piqa", index, "Question: " + r.text("goal") + "\nAnswer:",
                                {r.text("sol1"), r.text("sol2")}, r.index("label", 2)));
    } else if (task.name == "winogrande") {
      docs.push_back(winogrande_doc(r, index));
    } else {  // boolq
      docs.push_back(choice_doc("boolq", index,
                                r.text("passage") + "\nQuestion: " + r.text("question") +
                                    "?\nAnswer:",
                                {"no", "yes"}, r.index("label", 2)));
    }
  }
  ANVIL_CHECK(!docs.empty(), "[eval] {}: no records", options.data.string());
  return docs;
}

std::string mmlu_category(const std::string& subject) {
  const auto found = mmlu_subjects().find(subject);
  return found == mmlu_subjects().end() ? std::string(kMmluCustomCategory) : found->second;
}

std::string python_strip(const std::string& text) {
  size_t begin = 0, n = 0;
  while (begin < text.size() && tok::is_python_space(code_point_at(text, begin, n))) begin += n;
  return python_rstrip(text.substr(begin));
}

std::string python_rstrip(const std::string& text) {
  size_t end = 0;  // one past the last non-space code point
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    if (!tok::is_python_space(code_point_at(text, i, n))) end = i + n;
  }
  return text.substr(0, end);
}

int64_t python_length(const std::string& text) {
  int64_t count = 0;
  for (size_t i = 0, n = 0; i < text.size(); i += n) {
    code_point_at(text, i, n);
    ++count;
  }
  return count;
}

}  // namespace anvil
