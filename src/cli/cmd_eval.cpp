// `anvil eval`: the loss and perplexity of a model on a text file (tokenized whole, BOS added
// when the tokenizer's post-processor adds one) or on one split of a prepared shard directory;
// windows, scoring and the sliding-window --stride follow eval/perplexity.h, which matches the
// Hugging Face perplexity guide. With --task, a multiple-choice benchmark (MMLU, HellaSwag,
// ARC, PIQA, WinoGrande, BoolQ) scored as lm-evaluation-harness scores it (eval/tasks.h).
// With --json the last stdout line is a JSON summary.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>

#include "backend/backend.h"
#include "backend/registry.h"
#include "cli/command.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "core/log.h"
#include "data/shard_set.h"
#include "eval/perplexity.h"
#include "eval/task_eval.h"
#include "io/file_util.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

struct EvalOptions {
  std::string model;
  std::string text_file;
  std::string tokenizer;
  std::string data;
  std::string split = "val";
  int seq_len = 0;  // 0: the model's context
  int stride = 0;   // 0: seq_len
  int batch_size = 1;  // with --task: kTaskBatchRows unless given
  bool json = false;
  std::string backend = "cpu";
  std::string task;
  int shots = -1;
  int64_t limit = 0;
  std::string items_file;
};

// Longest forward call of task scoring: longer prefixes and rows run in several calls through
// the KV cache, so this bounds the activation memory, not the context.
constexpr int kTaskCallTokens = 1024;
// Sequences per forward call of task scoring when --batch-size is not given.
constexpr int kTaskBatchRows = 8;

// Returns the token ids of the whole text file.
std::vector<int32_t> tokenize_text_file(const EvalOptions& o, const ModelSource& source) {
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty()) {
    ANVIL_CHECK(source.tokenizer.has_value(),
                "[eval] {} has no tokenizer of its own; pass --tokenizer FILE",
                source.describe());
    tokenizer_path = source.tokenizer->string();
  }
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  ANVIL_CHECK(tokenizer->vocab_size() <= source.config.llama.vocab_size,
              "[eval] the tokenizer {} has {} ids but the model only {}", tokenizer_path,
              tokenizer->vocab_size(), source.config.llama.vocab_size);
  return tokenizer->encode(read_file(o.text_file), true);
}

std::string task_help() {
  std::string help = "multiple-choice benchmark scored as lm-evaluation-harness does:";
  for (const TaskInfo& task : known_tasks()) {
    help += fmt::format("\n  {} ({} split; --data {})", task.name, task.split, task.data_layout);
  }
  return help;
}

// Prints items/s and the time left about every two seconds while a task is scored.
class TaskProgress {
 public:
  explicit TaskProgress(std::string task) : task_(std::move(task)) {}
  void operator()(int64_t done, int64_t total) {
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - last_ < std::chrono::seconds(2)) return;
    last_ = now;
    const double seconds = std::chrono::duration<double>(now - start_).count();
    const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0.0;
    const double left = rate > 0 ? static_cast<double>(total - done) / rate : 0.0;
    log_info("[eval] {} {}/{} items  {:.1f} items/s  ETA {:.0f} s", task_, done, total, rate, left);
  }

 private:
  std::string task_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_ = start_;
};

int run_task_eval(const EvalOptions& o, const ModelSource& source) {
  const TaskInfo& task = find_task(o.task);
  ANVIL_CHECK(!o.data.empty(), "[eval] --task {} needs --data ({})", task.name, task.data_layout);
  ANVIL_CHECK(o.limit >= 0, "[eval] --limit must be >= 0");
  const int shots = o.shots >= 0 ? o.shots : task.default_shots;
  std::string tokenizer_path = o.tokenizer;
  if (tokenizer_path.empty()) {
    ANVIL_CHECK(source.tokenizer.has_value(),
                "[eval] {} has no tokenizer of its own; pass --tokenizer FILE", source.describe());
    tokenizer_path = source.tokenizer->string();
  }
  const std::unique_ptr<Tokenizer> tokenizer = Tokenizer::load(tokenizer_path);
  ANVIL_CHECK(tokenizer->vocab_size() <= source.config.llama.vocab_size,
              "[eval] the tokenizer {} has {} ids but the model only {}", tokenizer_path,
              tokenizer->vocab_size(), source.config.llama.vocab_size);
  const std::vector<TaskDoc> docs = load_task(
      TaskLoadOptions{.task = o.task, .data = o.data, .shots = o.shots, .limit = o.limit});

  const int window = o.seq_len > 0 ? o.seq_len : source.config.llama.max_seq_len;
  ANVIL_CHECK(window <= source.config.llama.max_seq_len,
              "[eval] --seq-len {} exceeds the model's context of {} tokens", window,
              source.config.llama.max_seq_len);
  ModelOptions model_options;
  model_options.max_batch = o.batch_size;
  model_options.max_seq = std::min(window, kTaskCallTokens);
  const std::unique_ptr<Backend> backend = make_backend(o.backend);
  const std::unique_ptr<LlamaModel> model = load_source_model(source, *backend, model_options);
  log_info("model: {}", source.describe());
  log_info("[eval] {}: {} items from {}, {}-shot, window {} tokens, {} rows per call", task.name,
           docs.size(), o.data, shots, window, o.batch_size);
  TaskEvalOptions options;
  options.max_rows = o.batch_size;
  options.window = window;
  options.on_progress = TaskProgress(task.name);
  const TaskScores scores = evaluate_task(*model, *tokenizer, task, shots, docs, options);

  if (!o.items_file.empty()) {
    std::string lines;
    for (size_t d = 0; d < docs.size(); ++d) {
      lines += doc_score_json(docs[d], scores.docs[d], task.has_acc_norm).dump() + "\n";
    }
    write_file_atomic(o.items_file, lines);
  }
  log_info("[eval] {} items in {:.1f} s ({:.2f} items/s); {} positions computed for {} requested "
           "({:.1f}x fewer from shared prefixes and merged choices)",
           scores.overall.items, scores.seconds,
           scores.seconds > 0 ? scores.overall.items / scores.seconds : 0.0,
           scores.tokens_computed, scores.tokens_requested,
           scores.tokens_computed > 0
               ? static_cast<double>(scores.tokens_requested) / scores.tokens_computed
               : 0.0);
  fmt::print("{}", task_scores_table(scores));
  if (o.json) {
    nlohmann::json summary = task_scores_json(scores);
    summary["model"] = o.model;
    fmt::print("{}\n", summary.dump());
  }
  std::fflush(stdout);
  return 0;
}

int run_eval(const std::vector<std::string>& args) {
  CLI::App app("Compute the loss and perplexity of a model on a text file or a prepared split, "
               "or its accuracy on a multiple-choice benchmark (--task).",
               "anvil eval");
  EvalOptions o;
  app.add_option("--model", o.model, "Hugging Face directory, anvil checkpoint or run directory")
      ->required();
  auto* text_option = app.add_option("--text-file", o.text_file, "text evaluated as one sequence");
  app.add_option("--tokenizer", o.tokenizer,
                 "tokenizer for --text-file (default: the model's own)");
  auto* data_option = app.add_option(
      "--data", o.data, "shard directory from `anvil prepare`, or with --task the task's data");
  auto* task_option = app.add_option("--task", o.task, task_help());
  task_option->excludes(text_option);
  app.add_option("--shots", o.shots, "few-shot examples per question (mmlu; default 5)");
  app.add_option("--limit", o.limit,
                 "with --task: only the first N questions of each subtask (0: all), as the "
                 "harness's --limit");
  app.add_option("--items", o.items_file,
                 "with --task: write one JSON line per question (log-likelihoods, acc) to FILE");
  app.add_option("--split", o.split, "split of --data")->capture_default_str();
  text_option->excludes(data_option);
  app.add_option("--seq-len", o.seq_len, "window length in tokens (default: the model's context)");
  app.add_option("--stride", o.stride,
                 "distance between window starts; < seq-len scores each token once with more "
                 "context, as the Hugging Face perplexity guide (default: seq-len)");
  app.add_option("--batch-size", o.batch_size,
                 "windows per forward pass (with --task: sequences, default 8)")
      ->capture_default_str();
  app.add_flag("--json", o.json, "print a JSON summary as the last line");
  app.add_option("--backend", o.backend, backend_choices())->capture_default_str();
  ThreadOption threads;
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  ANVIL_CHECK(!o.text_file.empty() || !o.data.empty() || !o.task.empty(),
              "[eval] pass --text-file FILE, --data DIR or --task NAME --data PATH (see 'anvil "
              "eval --help')");
  ANVIL_CHECK(o.seq_len >= 0 && o.stride >= 0 && o.batch_size >= 1,
              "[eval] --seq-len and --stride must be >= 0 and --batch-size >= 1");

  const ModelSource source = resolve_model_source(o.model);
  if (!o.task.empty()) {
    if (app.count("--batch-size") == 0) o.batch_size = kTaskBatchRows;
    return run_task_eval(o, source);
  }
  ANVIL_CHECK(o.shots < 0 && o.limit == 0 && o.items_file.empty(),
              "[eval] --shots, --limit and --items apply to --task");
  std::vector<int32_t> text_tokens;
  std::unique_ptr<ShardSet> shards;
  int64_t n_tokens = 0;
  if (!o.text_file.empty()) {
    text_tokens = tokenize_text_file(o, source);
    n_tokens = static_cast<int64_t>(text_tokens.size());
  } else {
    shards = std::make_unique<ShardSet>(o.data, o.split);
    n_tokens = static_cast<int64_t>(shards->token_count());
  }

  PerplexityOptions options;
  options.seq_len = o.seq_len > 0 ? o.seq_len : source.config.llama.max_seq_len;
  options.stride = o.stride;
  options.batch_size = o.batch_size;
  const std::vector<PerplexityWindow> windows =
      plan_perplexity_windows(n_tokens, options.seq_len, options.stride);
  // Activations only need the longest window, which a short input makes shorter than seq_len.
  int64_t longest = 0;
  for (const PerplexityWindow& w : windows) longest = std::max(longest, w.length());
  ModelOptions model_options;
  model_options.max_batch = std::min<int>(o.batch_size, static_cast<int>(windows.size()));
  model_options.max_seq = static_cast<int>(longest);
  options.batch_size = model_options.max_batch;
  ANVIL_CHECK(longest <= source.config.llama.max_seq_len,
              "[eval] --seq-len {} exceeds the model's context of {} tokens", options.seq_len,
              source.config.llama.max_seq_len);

  const std::unique_ptr<Backend> backend = make_backend(o.backend);
  const std::unique_ptr<LlamaModel> model = load_source_model(source, *backend, model_options);
  const auto start = std::chrono::steady_clock::now();
  const PerplexityResult result =
      shards ? evaluate_perplexity(*model, *shards, options)
             : evaluate_perplexity(*model, std::span<const int32_t>(text_tokens), options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  const int stride = options.stride > 0 ? options.stride : options.seq_len;
  log_info("model: {}", source.describe());
  if (source.config.sliding_window) {
    log_info("note: sliding_window {} < max_position_embeddings {}: the context is capped at the "
             "window, where sliding-window attention equals full attention",
             *source.config.sliding_window, source.config.max_position_embeddings);
  }
  log_info("input: {} ({} tokens; {} scored in {} windows, seq_len {}, stride {})",
           shards ? shards->describe() : o.text_file, result.input_tokens, result.scored_tokens,
           result.windows, options.seq_len, stride);
  log_info("loss {:.6f}  perplexity {:.4f}  ({:.1f} s, {:.0f} tokens/s)", result.loss,
           result.perplexity, seconds,
           seconds > 0 ? static_cast<double>(result.scored_tokens) / seconds : 0.0);
  if (o.json) {
    const nlohmann::json summary = {{"model", o.model},
                                    {"loss", result.loss},
                                    {"perplexity", result.perplexity},
                                    {"tokens", result.scored_tokens},
                                    {"input_tokens", result.input_tokens},
                                    {"windows", result.windows},
                                    {"seq_len", options.seq_len},
                                    {"stride", stride}};
    fmt::print("{}\n", summary.dump());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

ANVIL_COMMAND("eval", "perplexity on text or shards; MMLU, HellaSwag, ARC... accuracy (--task)", 50,
              run_eval);

}  // namespace anvil::cli
