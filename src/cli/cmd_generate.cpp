// `anvil generate`: sample text from a trained run, a checkpoint or a Hugging Face directory,
// optionally with a PEFT LoRA adapter (--adapter), or chat with it (--chat, generate_chat.h).
// The prompt is prefilled into
// the model's KV cache in one call, then each new token costs one single-position step
// (eval/generation.h); tokens are decoded and flushed to stdout as they come. Sampling is
// reproducible for a --seed.
#include <fmt/format.h>

#include <chrono>
#include <algorithm>
#include <cstdio>
#include <iostream>
#include <sstream>

#include "backend/backend.h"
#include "backend/registry.h"
#include "cli/command.h"
#include "cli/generate_chat.h"
#include "cli/model_source.h"
#include "core/error.h"
#include "eval/generation.h"
#include "model/kv_cache.h"
#include "model/llama.h"
#include "model/sampling.h"
#include "tokenizer/tokenizer.h"

namespace anvil::cli {
namespace {

struct GenerateOptions {
  std::string run_dir;
  std::string checkpoint_dir;
  std::string model_dir;
  std::string tokenizer_path;
  std::string prompt;
  std::string prompt_ids;
  bool print_ids = false;
  int max_new_tokens = 200;
  SamplingParams sampling{0.8f, 40, 0.95f, 0};
  bool greedy = false;
  std::string backend = "cpu";
  std::string adapter_dir;
  bool chat = false;
  std::string chat_template;
  std::string system;
};

// Longest chat context (KV cache and activations) when the model allows more.
constexpr int kMaxChatContext = 4096;

// Parses --prompt-ids ("1 2 3"), checking each id against the model's vocabulary.
std::vector<int32_t> parse_prompt_ids(const std::string& text, int vocab_size) {
  std::vector<int32_t> ids;
  std::istringstream words(text);
  for (std::string word; words >> word;) {
    size_t used = 0;
    long id = -1;
    try {
      id = std::stol(word, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    ANVIL_CHECK(used == word.size() && id >= 0 && id < vocab_size,
                "[generate] --prompt-ids: '{}' is not a token id in [0, {})", word, vocab_size);
    ids.push_back(static_cast<int32_t>(id));
  }
  ANVIL_CHECK(!ids.empty(), "[generate] --prompt-ids is empty");
  return ids;
}

// Returns the prompt ids; an empty prompt starts from the document separator (BOS, else EOS).
std::vector<int32_t> prompt_ids(const Tokenizer& tokenizer, const std::string& prompt) {
  std::vector<int32_t> ids = tokenizer.encode(prompt, true);
  if (ids.empty()) {
    const std::optional<int32_t> start =
        tokenizer.bos_id() ? tokenizer.bos_id() : tokenizer.eos_id();
    ANVIL_CHECK(start.has_value(),
                "[generate] the prompt is empty and the tokenizer has no BOS or EOS to start "
                "from; pass --prompt");
    ids.push_back(*start);
  }
  return ids;
}

int run_generate(const std::vector<std::string>& args) {
  CLI::App app("Generate text from a trained model (streams tokens as they are sampled).",
               "anvil generate");
  GenerateOptions o;
  auto* run_option =
      app.add_option("--run", o.run_dir, "run directory: its newest valid checkpoint");
  auto* checkpoint_option = app.add_option("--checkpoint", o.checkpoint_dir, "a checkpoint folder");
  auto* model_option =
      app.add_option("--model", o.model_dir, "a Hugging Face model directory (config.json + safetensors)");
  run_option->excludes(checkpoint_option)->excludes(model_option);
  checkpoint_option->excludes(model_option);
  app.add_option("--tokenizer", o.tokenizer_path,
                 "tokenizer file or directory (default: the model's, or the run's data tokenizer)");
  app.add_option("--prompt", o.prompt, "text to continue (default: start a new document)");
  app.add_option("--prompt-ids", o.prompt_ids, "prompt as space-separated token ids (no tokenizer needed)")
      ->excludes("--prompt");
  app.add_flag("--print-ids", o.print_ids, "print the generated token ids instead of text");
  app.add_option("--max-new-tokens", o.max_new_tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", o.sampling.temperature, "softmax temperature (0 = greedy)")
      ->capture_default_str();
  app.add_option("--top-k", o.sampling.top_k, "sample among the k most likely (0 = all)")
      ->capture_default_str();
  app.add_option("--top-p", o.sampling.top_p, "nucleus sampling mass")->capture_default_str();
  app.add_option("--seed", o.sampling.seed, "sampling seed")->capture_default_str();
  app.add_flag("--greedy", o.greedy, "always pick the most likely token");
  app.add_option("--backend", o.backend, backend_choices())->capture_default_str();
  app.add_option("--adapter", o.adapter_dir,
                 "a PEFT LoRA adapter folder (adapter_config.json + adapter_model.safetensors, "
                 "from anvil or peft) applied to the model");
  auto* chat_flag = app.add_flag(
      "--chat", o.chat,
      "chat: each stdin line is a user turn, rendered with the chat template; replies stream "
      "until the end-of-turn token; end of input quits");
  chat_flag->excludes("--prompt")->excludes("--prompt-ids")->excludes("--print-ids");
  app.add_option("--chat-template", o.chat_template,
                 "llama3, chatml, llama2 or plain (default: from the tokenizer)");
  app.add_option("--system", o.system, "system message for --chat");
  ThreadOption threads;
  threads.add_to(app);
  if (!parse_args(app, args)) return 0;
  threads.configure();
  const std::string source_path =
      !o.model_dir.empty() ? o.model_dir : !o.run_dir.empty() ? o.run_dir : o.checkpoint_dir;
  ANVIL_CHECK(!source_path.empty(),
              "[generate] pass --run DIR, --checkpoint DIR or --model HF_DIR "
              "(see 'anvil generate --help')");
  ANVIL_CHECK(o.max_new_tokens >= 0, "[generate] --max-new-tokens must be >= 0");
  if (o.greedy) o.sampling.temperature = 0.0f;
  o.sampling.validate();

  ModelSource source = resolve_model_source(source_path);
  if (!o.adapter_dir.empty()) {
    ANVIL_CHECK(!source.adapter.has_value(),
                "[generate] {} already carries a LoRA adapter; --adapter applies to a base "
                "model",
                source.describe());
    ANVIL_CHECK(std::filesystem::is_directory(o.adapter_dir),
                "[generate] --adapter {}: no such directory", o.adapter_dir);
    source.adapter = o.adapter_dir;
  }
  ANVIL_CHECK(o.chat_template.empty() || o.chat,
              "[generate] --chat-template applies to --chat");
  const LlamaConfig& llama = source.config.llama;
  // A tokenizer is needed to encode a text prompt or to print text; ids alone need none.
  std::unique_ptr<Tokenizer> tokenizer;
  if (o.prompt_ids.empty() || !o.print_ids) {
    ANVIL_CHECK(!o.tokenizer_path.empty() || source.tokenizer.has_value(),
                "[generate] no tokenizer found for {}; pass --tokenizer", source.describe());
    tokenizer = Tokenizer::load(o.tokenizer_path.empty() ? source.tokenizer->string()
                                                         : o.tokenizer_path);
    ANVIL_CHECK(tokenizer->vocab_size() <= llama.vocab_size,
                "[generate] the tokenizer has {} ids but the model only {}",
                tokenizer->vocab_size(), llama.vocab_size);
  }

  const std::unique_ptr<Backend> backend = make_backend(o.backend);
  if (o.chat) {
    ChatSettings chat;
    chat.chat_template = o.chat_template;
    chat.system = o.system;
    chat.max_new_tokens = o.max_new_tokens;
    chat.context = std::min(llama.max_seq_len, kMaxChatContext);
    chat.sampling = o.sampling;
    ModelOptions chat_options;
    chat_options.max_batch = 1;
    chat_options.max_seq = chat.context;
    const std::unique_ptr<LlamaModel> model = load_source_model(source, *backend, chat_options);
    const int replies = run_chat(chat, *model, *tokenizer, source.config, std::cin);
    fmt::print(stderr, "[generate] {} replies from {}\n", replies, source.describe());
    return 0;
  }
  const std::vector<int32_t> prompt = o.prompt_ids.empty()
                                          ? prompt_ids(*tokenizer, o.prompt)
                                          : parse_prompt_ids(o.prompt_ids, llama.vocab_size);
  ANVIL_CHECK(static_cast<int>(prompt.size()) < llama.max_seq_len,
              "[generate] the prompt has {} tokens; the model's context is {}", prompt.size(),
              llama.max_seq_len);
  const int context =
      std::min<int>(llama.max_seq_len, static_cast<int>(prompt.size()) + o.max_new_tokens);
  ModelOptions model_options;
  model_options.max_batch = 1;
  model_options.max_seq = context;
  const std::unique_ptr<LlamaModel> model = load_source_model(source, *backend, model_options);
  KvCache cache(llama, *backend, 1, context);
  Sampler sampler(o.sampling);
  GenerationLimits limits;
  limits.max_new_tokens = o.max_new_tokens;
  // Stop at the tokenizer's EOS or any of the model's (Llama 3 instruct lists several).
  limits.stop_ids = source.config.eos_token_ids;
  if (tokenizer && tokenizer->eos_id()) limits.stop_ids.push_back(*tokenizer->eos_id());
  // Sample only among ids the tokenizer can print; the model may pad its vocabulary.
  limits.sample_vocab = tokenizer && !o.print_ids ? tokenizer->vocab_size() : llama.vocab_size;

  if (!o.print_ids) fmt::print(stdout, "{}", o.prompt);
  std::fflush(stdout);
  std::optional<TextStream> stream;
  if (!o.print_ids) stream.emplace(*tokenizer);
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int32_t> generated = generate_tokens(
      *model, cache, sampler, prompt, limits, [&](std::span<const int32_t> tokens) {
        if (o.print_ids) {
          fmt::print(stdout, "{}{}", tokens.size() > 1 ? " " : "", tokens.back());
        } else {
          const std::string text = stream->next(tokens);
          std::fwrite(text.data(), 1, text.size(), stdout);
        }
        std::fflush(stdout);
      });
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fmt::print(stdout, "\n");
  std::fflush(stdout);
  fmt::print(stderr, "[generate] {} tokens in {:.2f} s ({:.1f} tokens/s) from {}\n",
             generated.size(), seconds, seconds > 0 ? generated.size() / seconds : 0.0,
             source.describe());
  return 0;
}

}  // namespace

ANVIL_COMMAND("generate", "sample text from a run, checkpoint or HF model (KV cache, streaming)", 40,
              run_generate);

}  // namespace anvil::cli
