// config.json reading and writing. Each supported architecture has a row of facts (its
// model_type, whether its attention carries q/k/v biases, whether it honours head_dim and a
// sliding window); the parser reads fields with one small typed reader so every error has the
// same shape: "[hf-config] <file>: '<field>' <problem>". Absent optional fields take the
// defaults of the transformers config class (4.46), e.g. rms_norm_eps 1e-6, rope_theta 10000.
#include "model/hf_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>

#include "core/error.h"
#include "io/file_util.h"
#include "io/json_util.h"

namespace anvil {
namespace {

using nlohmann::json;

// config.json files nest little (rope_scaling, id2label, quantization_config ...).
constexpr int kMaxConfigDepth = 16;

struct ArchitectureFacts {
  const char* name;
  const char* model_type;
  bool qkv_bias;          // Qwen2: q/k/v projections always carry a bias
  bool honours_head_dim;  // the modeling code reads config.head_dim
  bool has_sliding_window_switch;  // Qwen2: the window applies only with use_sliding_window
};

constexpr ArchitectureFacts kArchitectures[] = {
    {"LlamaForCausalLM", "llama", false, true, false},
    {"MistralForCausalLM", "mistral", false, true, false},
    {"Qwen2ForCausalLM", "qwen2", true, false, true},
};

const ArchitectureFacts* find_architecture(std::string_view name) {
  for (const ArchitectureFacts& facts : kArchitectures) {
    if (name == facts.name) return &facts;
  }
  return nullptr;
}

const ArchitectureFacts* find_model_type(std::string_view model_type) {
  for (const ArchitectureFacts& facts : kArchitectures) {
    if (model_type == facts.model_type) return &facts;
  }
  return nullptr;
}

// Typed access to the fields of one config.json object; a null value counts as absent.
class FieldReader {
 public:
  FieldReader(const json& root, const std::string& file) : root_(root), file_(file) {}

  const json* find(const char* key) const {
    const auto it = root_.find(key);
    return it == root_.end() || it->is_null() ? nullptr : &*it;
  }

  [[noreturn]] void fail(const char* key, const std::string& problem) const {
    ANVIL_FAIL("[hf-config] {}: '{}' {}", file_, key, problem);
  }

  int required_int(const char* key) const {
    const json* value = find(key);
    if (value == nullptr) fail(key, "is missing");
    return to_int(key, *value);
  }

  int optional_int(const char* key, int fallback) const {
    const json* value = find(key);
    return value == nullptr ? fallback : to_int(key, *value);
  }

  double optional_number(const char* key, double fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    return json_real(*value, fmt::format("[hf-config] {}: '{}'", file_, key));
  }

  double required_number_in(const json& object, const char* parent, const char* key) const {
    const auto it = object.find(key);
    const std::string name = fmt::format("{}.{}", parent, key);
    if (it == object.end() || it->is_null()) fail(name.c_str(), "is missing");
    return json_real(*it, fmt::format("[hf-config] {}: '{}'", file_, name));
  }

  bool optional_bool(const char* key, bool fallback) const {
    const json* value = find(key);
    if (value == nullptr) return fallback;
    if (!value->is_boolean()) fail(key, fmt::format("must be true or false, got {}", value->dump()));
    return value->get<bool>();
  }

  std::string optional_string(const char* key) const {
    const json* value = find(key);
    if (value == nullptr) return {};
    if (!value->is_string()) fail(key, fmt::format("must be a string, got {}", value->dump()));
    return value->get<std::string>();
  }

  std::optional<int32_t> optional_token_id(const char* key) const {
    const json* value = find(key);
    if (value == nullptr) return std::nullopt;
    return to_int(key, *value);
  }

  std::vector<int32_t> token_id_list(const char* key) const {
    const json* value = find(key);
    if (value == nullptr) return {};
    if (!value->is_array()) return {to_int(key, *value)};
    std::vector<int32_t> ids;
    for (const json& id : *value) ids.push_back(to_int(key, id));
    return ids;
  }

 private:
  int to_int(const char* key, const json& value) const {
    return json_integer<int>(value, fmt::format("[hf-config] {}: '{}'", file_, key));
  }

  const json& root_;
  const std::string& file_;
};

const ArchitectureFacts& read_architecture(const FieldReader& fields, const std::string& file,
                                           std::string& name) {
  const std::string model_type = fields.optional_string("model_type");
  const json* architectures = fields.find("architectures");
  if (architectures != nullptr) {
    if (!architectures->is_array() || architectures->empty() || !(*architectures)[0].is_string()) {
      fields.fail("architectures", fmt::format("must be a non-empty list of class names, got {}",
                                               architectures->dump()));
    }
    name = (*architectures)[0].get<std::string>();
    const ArchitectureFacts* facts = find_architecture(name);
    ANVIL_CHECK(facts != nullptr,
                "[hf-config] {}: 'architectures' is {}: not supported (anvil loads {})", file,
                quote_for_message(name), fmt::join(supported_hf_architectures(), ", "));
    ANVIL_CHECK(architectures->size() == 1, "[hf-config] {}: 'architectures' lists {} classes; "
                "anvil expects one", file, architectures->size());
    return *facts;
  }
  ANVIL_CHECK(!model_type.empty(),
              "[hf-config] {}: neither 'architectures' nor 'model_type' is set", file);
  const ArchitectureFacts* facts = find_model_type(model_type);
  ANVIL_CHECK(facts != nullptr,
              "[hf-config] {}: 'model_type' is {}: not supported (anvil loads llama, mistral, "
              "qwen2)",
              file, quote_for_message(model_type));
  name = facts->name;
  return *facts;
}

// Reads the RoPE scaling object `key` (rope_scaling, or transformers 5's rope_parameters):
// null, {"rope_type"|"type": "default"} or a complete "llama3" object.
void read_rope_scaling(const FieldReader& fields, const std::string& file, const char* key,
                       LlamaConfig& llama) {
  const json* scaling = fields.find(key);
  if (scaling == nullptr) return;
  if (!scaling->is_object()) fields.fail(key, "must be an object or null");
  std::string type;
  for (const char* type_key : {"rope_type", "type"}) {
    const auto it = scaling->find(type_key);
    if (it != scaling->end() && it->is_string()) {
      type = it->get<std::string>();
      break;
    }
  }
  if (type == "default") return;
  ANVIL_CHECK(type == "llama3",
              "[hf-config] {}: '{}' type {} is not supported (anvil implements "
              "\"llama3\"; linear, dynamic, yarn and longrope scaling are not)",
              file, key, type.empty() ? std::string("(missing)") : quote_for_message(type));
  const double factor = fields.required_number_in(*scaling, key, "factor");
  const double low = fields.required_number_in(*scaling, key, "low_freq_factor");
  const double high = fields.required_number_in(*scaling, key, "high_freq_factor");
  const double original =
      fields.required_number_in(*scaling, key, "original_max_position_embeddings");
  ANVIL_CHECK(factor >= 1.0, "[hf-config] {}: '{}.factor' must be >= 1, got {}", file, key,
              factor);
  ANVIL_CHECK(original >= 1.0 && original == std::floor(original) && original < 1e9,
              "[hf-config] {}: '{}.original_max_position_embeddings' must be a "
              "positive integer, got {}",
              file, key, original);
  llama.rope_scaling_factor = static_cast<float>(factor);
  llama.rope_low_freq_factor = static_cast<float>(low);
  llama.rope_high_freq_factor = static_cast<float>(high);
  llama.rope_original_max_position = static_cast<int>(original);
}

// Reads rope_theta and the scaling: top-level rope_theta and rope_scaling (transformers 4), or
// rope_parameters holding both (transformers 5). A file with both spellings must agree.
void read_rope(const FieldReader& fields, const std::string& file, LlamaConfig& llama) {
  llama.rope_theta = static_cast<float>(fields.optional_number("rope_theta", 10000.0));
  read_rope_scaling(fields, file, "rope_scaling", llama);
  const json* parameters = fields.find("rope_parameters");
  if (parameters == nullptr) return;
  if (!parameters->is_object()) fields.fail("rope_parameters", "must be an object or null");
  LlamaConfig nested = llama;
  nested.rope_scaling_factor = 0.0f;
  const auto theta = parameters->find("rope_theta");
  if (theta != parameters->end()) {
    nested.rope_theta = static_cast<float>(
        json_real(*theta, fmt::format("[hf-config] {}: 'rope_parameters.rope_theta'", file)));
  }
  read_rope_scaling(fields, file, "rope_parameters", nested);
  const bool top_level_theta = fields.find("rope_theta") != nullptr;
  const bool top_level_scaling = fields.find("rope_scaling") != nullptr;
  ANVIL_CHECK((!top_level_theta || nested.rope_theta == llama.rope_theta) &&
                  (!top_level_scaling || nested.rope_scaling_factor == llama.rope_scaling_factor),
              "[hf-config] {}: 'rope_parameters' (rope_theta {}, scaling factor {}) disagrees "
              "with the top-level rope_theta / rope_scaling (rope_theta {}, scaling factor {})",
              file, nested.rope_theta, nested.rope_scaling_factor, llama.rope_theta,
              llama.rope_scaling_factor);
  llama = nested;
}

// Rejects the attention and MLP variants anvil does not compute.
void check_supported_variants(const FieldReader& fields, const ArchitectureFacts& arch,
                              const std::string& file) {
  std::string act = fields.optional_string("hidden_act");
  if (act.empty()) act = "silu";
  ANVIL_CHECK(act == "silu" || act == "swish",
              "[hf-config] {}: 'hidden_act' is {}; anvil implements only silu (SwiGLU)", file,
              quote_for_message(act));
  if (!arch.qkv_bias) {
    ANVIL_CHECK(!fields.optional_bool("attention_bias", false),
                "[hf-config] {}: 'attention_bias' is true: {} then adds biases to q, k, v and "
                "o_proj, and anvil supports q/k/v biases only (Qwen2)",
                file, arch.name);
  }
  ANVIL_CHECK(!fields.optional_bool("mlp_bias", false),
              "[hf-config] {}: 'mlp_bias' is true; anvil's MLP has no biases", file);
  ANVIL_CHECK(fields.find("quantization_config") == nullptr,
              "[hf-config] {}: 'quantization_config' is set; anvil loads unquantized "
              "f32/bf16/f16 weights only",
              file);
}

// Applies the sliding-window rule of the header: cap the context at a window that is shorter.
void apply_sliding_window(const FieldReader& fields, const ArchitectureFacts& arch,
                          HfModelConfig& config) {
  if (arch.has_sliding_window_switch && !fields.optional_bool("use_sliding_window", false)) return;
  const json* window = fields.find("sliding_window");
  if (window == nullptr) return;
  const int size = fields.optional_int("sliding_window", 0);
  if (size <= 0) fields.fail("sliding_window", fmt::format("must be positive or null, got {}", size));
  if (size >= config.llama.max_seq_len) return;
  config.llama.max_seq_len = size;
  config.sliding_window = size;
}

// Returns a float as the double with the shortest decimal spelling that rounds back to it,
// so 1e-5f is written as 1e-05 rather than 9.99999974737875e-06.
double shortest_double(float value) { return std::stod(fmt::format("{}", value)); }

}  // namespace

const std::vector<std::string>& supported_hf_architectures() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const ArchitectureFacts& facts : kArchitectures) out.emplace_back(facts.name);
    return out;
  }();
  return names;
}

HfModelConfig parse_hf_config(std::string_view text, const std::string& file) {
  HfModelConfig config;
  config.source = parse_json_strict(text, "[hf-config] " + file, kMaxConfigDepth);
  ANVIL_CHECK(config.source.is_object(), "[hf-config] {}: the document must be a JSON object",
              file);
  const FieldReader fields(config.source, file);
  const ArchitectureFacts& arch =
      read_architecture(fields, file, config.architecture);
  check_supported_variants(fields, arch, file);

  LlamaConfig& llama = config.llama;
  llama.dim = fields.required_int("hidden_size");
  llama.n_layers = fields.required_int("num_hidden_layers");
  llama.n_heads = fields.required_int("num_attention_heads");
  llama.n_kv_heads = fields.optional_int("num_key_value_heads", llama.n_heads);
  llama.ffn_dim = fields.required_int("intermediate_size");
  llama.vocab_size = fields.required_int("vocab_size");
  config.max_position_embeddings = fields.required_int("max_position_embeddings");
  llama.max_seq_len = config.max_position_embeddings;
  llama.norm_eps = static_cast<float>(fields.optional_number("rms_norm_eps", 1e-6));
  llama.tie_embeddings = fields.optional_bool("tie_word_embeddings", false);
  llama.attention_bias = arch.qkv_bias;
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "intermediate_size", "vocab_size",
                          "max_position_embeddings"}) {
    if (fields.find(key) != nullptr && fields.optional_int(key, 0) <= 0) {
      fields.fail(key, fmt::format("must be positive, got {}", fields.optional_int(key, 0)));
    }
  }
  if (llama.n_heads > 0 && llama.n_kv_heads > 0 && llama.n_heads % llama.n_kv_heads != 0) {
    fields.fail("num_key_value_heads",
                fmt::format("({}) must divide num_attention_heads ({})", llama.n_kv_heads,
                            llama.n_heads));
  }

  // head_dim: absent or null means hidden_size / num_attention_heads, which must be exact.
  const int implied_head_dim = llama.dim / llama.n_heads;
  const int head_dim = fields.optional_int("head_dim", 0);
  if (fields.find("head_dim") == nullptr) {
    if (llama.dim % llama.n_heads != 0) {
      fields.fail("hidden_size", fmt::format("({}) is not divisible by num_attention_heads ({}) "
                                             "and no head_dim is given",
                                             llama.dim, llama.n_heads));
    }
  } else if (head_dim <= 0) {
    fields.fail("head_dim", fmt::format("must be positive, got {}", head_dim));
  } else if (!arch.honours_head_dim &&
             (head_dim != implied_head_dim || llama.dim % llama.n_heads != 0)) {
    fields.fail("head_dim", fmt::format("({}) differs from hidden_size / num_attention_heads "
                                        "({} / {}), which {} uses instead",
                                        head_dim, llama.dim, llama.n_heads, arch.name));
  } else {
    llama.head_dim = head_dim == implied_head_dim && llama.dim % llama.n_heads == 0 ? 0 : head_dim;
  }
  read_rope(fields, file, llama);
  apply_sliding_window(fields, arch, config);

  config.torch_dtype = fields.optional_string("torch_dtype");
  if (config.torch_dtype.empty()) config.torch_dtype = fields.optional_string("dtype");
  config.bos_token_id = fields.optional_token_id("bos_token_id");
  config.eos_token_ids = fields.token_id_list("eos_token_id");
  config.pad_token_id = fields.optional_token_id("pad_token_id");
  try {
    llama.validate();
  } catch (const Error& e) {
    ANVIL_FAIL("[hf-config] {}: {}", file, e.what());
  }
  return config;
}

HfModelConfig read_hf_config(const std::filesystem::path& path) {
  const std::filesystem::path file =
      std::filesystem::is_directory(path) ? path / "config.json" : path;
  ANVIL_CHECK(std::filesystem::is_regular_file(file),
              "[hf-config] {}: not found (expected a Hugging Face model directory with "
              "config.json)",
              file.string());
  return parse_hf_config(read_file(file), file.string());
}

LlamaConfig llama_config_from_hf_json(const std::filesystem::path& path) {
  return read_hf_config(path).llama;
}

HfModelConfig hf_config_from_llama(const LlamaConfig& llama) {
  llama.validate();
  HfModelConfig config;
  config.llama = llama;
  config.architecture = llama.attention_bias ? "Qwen2ForCausalLM" : "LlamaForCausalLM";
  config.max_position_embeddings = llama.max_seq_len;
  return config;
}

json hf_config_to_json(const HfModelConfig& config, std::string_view torch_dtype) {
  const ArchitectureFacts* arch = find_architecture(config.architecture);
  ANVIL_CHECK(arch != nullptr, "[hf-config] cannot write architecture '{}'", config.architecture);
  const LlamaConfig& llama = config.llama;
  ANVIL_CHECK(!llama.attention_bias || arch->qkv_bias,
              "[hf-config] {} cannot express q/k/v biases without an o_proj bias; export the "
              "model as Qwen2ForCausalLM",
              config.architecture);
  ANVIL_CHECK(llama.attention_bias || !arch->qkv_bias,
              "[hf-config] {} always has q/k/v biases but this model has none",
              config.architecture);
  ANVIL_CHECK(arch->honours_head_dim || llama.head_dim == 0 ||
                  llama.head_dim * llama.n_heads == llama.dim,
              "[hf-config] {} ignores head_dim, so head_dim {} (hidden_size {} / {} heads) "
              "cannot be exported as it",
              config.architecture, llama.head_dim, llama.dim, llama.n_heads);
  json out = config.source.is_object() ? config.source : json::object();
  out["architectures"] = json::array({config.architecture});
  out["model_type"] = arch->model_type;
  out["hidden_size"] = llama.dim;
  out["intermediate_size"] = llama.ffn_dim;
  out["num_hidden_layers"] = llama.n_layers;
  out["num_attention_heads"] = llama.n_heads;
  out["num_key_value_heads"] = llama.n_kv_heads;
  if (arch->honours_head_dim) out["head_dim"] = llama.resolved_head_dim();
  out["vocab_size"] = llama.vocab_size;
  out["max_position_embeddings"] =
      config.max_position_embeddings > 0 ? config.max_position_embeddings : llama.max_seq_len;
  out["rope_theta"] = shortest_double(llama.rope_theta);
  if (llama.rope_scaling_factor > 0.0f) {
    out["rope_scaling"] = {
        {"rope_type", "llama3"},
        {"factor", shortest_double(llama.rope_scaling_factor)},
        {"low_freq_factor", shortest_double(llama.rope_low_freq_factor)},
        {"high_freq_factor", shortest_double(llama.rope_high_freq_factor)},
        {"original_max_position_embeddings", llama.rope_original_max_position}};
  } else {
    out["rope_scaling"] = nullptr;
  }
  out["rms_norm_eps"] = shortest_double(llama.norm_eps);
  out["tie_word_embeddings"] = llama.tie_embeddings;
  out["hidden_act"] = "silu";
  if (!arch->qkv_bias) {
    out["attention_bias"] = false;
    out["mlp_bias"] = false;
  }
  if (arch->has_sliding_window_switch && !out.contains("use_sliding_window")) {
    out["use_sliding_window"] = false;
  }
  if (config.bos_token_id) out["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) out["eos_token_id"] = config.eos_token_ids[0];
  if (config.eos_token_ids.size() > 1) out["eos_token_id"] = config.eos_token_ids;
  if (config.pad_token_id) out["pad_token_id"] = *config.pad_token_id;
  out["torch_dtype"] = torch_dtype;
  if (out.contains("dtype")) out["dtype"] = torch_dtype;
  return out;
}

void write_hf_config_json(const std::filesystem::path& path, const HfModelConfig& config,
                          std::string_view torch_dtype) {
  write_file_atomic(path, hf_config_to_json(config, torch_dtype).dump(2) + "\n");
}

json hf_generation_config_json(const HfModelConfig& config) {
  json out = {{"_from_model_config", true}};
  if (config.bos_token_id) out["bos_token_id"] = *config.bos_token_id;
  if (config.eos_token_ids.size() == 1) out["eos_token_id"] = config.eos_token_ids[0];
  if (config.eos_token_ids.size() > 1) out["eos_token_id"] = config.eos_token_ids;
  if (config.pad_token_id) out["pad_token_id"] = *config.pad_token_id;
  return out;
}

}  // namespace anvil
