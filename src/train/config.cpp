// Loading, overriding and writing the training configuration. TOML is parsed with toml++;
// values are checked against the type of the field they land in, and every unknown name is
// reported with the nearest valid one. Numbers are written back with the shortest text that
// round-trips ({fmt} "{}"), so a config.toml read back yields bit-identical values.
#include "train/config.h"

#include <fmt/format.h>
#include <toml++/toml.h>

#include <algorithm>
#include <charconv>
#include <fstream>
#include <limits>
#include <sstream>

#include "core/checked_number.h"
#include "core/error.h"

namespace anvil {
namespace {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      const size_t substitution = diagonal + (a[i - 1] == b[j - 1] ? 0 : 1);
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, substitution});
      diagonal = above;
    }
  }
  return row[b.size()];
}

bool is_section(std::string_view name) {
  const auto& sections = config_sections();
  return std::find(sections.begin(), sections.end(), name) != sections.end();
}

const ConfigField* find_field(std::string_view section, std::string_view key) {
  for (const ConfigField& field : config_fields()) {
    if (field.section == section && field.key == key) return &field;
  }
  return nullptr;
}

// Returns the valid "section.key" nearest to an unknown one. The key part weighs most: the
// same key in another section ("training.lr" -> "optimizer.lr") beats a similar key in the
// named section, and a key that is a prefix of a valid one counts as one edit.
std::string nearest_full_name(std::string_view section, std::string_view key) {
  const ConfigField* best = nullptr;
  size_t best_score = SIZE_MAX;
  for (const ConfigField& field : config_fields()) {
    size_t key_score = edit_distance(key, field.key);
    if (!key.empty() && (field.key.starts_with(key) || key.starts_with(field.key))) {
      key_score = std::min<size_t>(key_score, 1);
    }
    // A key outside any section says nothing about the section: ties go to the table order.
    size_t section_score = 0;
    if (field.section != section)
      section_score = section.empty() ? 1 : 1 + edit_distance(section, field.section) / 4;
    const size_t score = 2 * key_score + section_score;
    if (score < best_score) {
      best_score = score;
      best = &field;
    }
  }
  return best ? best->full_name() : std::string();
}

std::vector<std::string> section_names() {
  return {config_sections().begin(), config_sections().end()};
}

[[noreturn]] void fail_unknown_section(std::string_view section, std::string_view where) {
  ANVIL_FAIL("[config] {}unknown section '{}' (did you mean '{}'?)", where, section,
             closest_name(section, section_names()));
}

[[noreturn]] void fail_unknown_key(std::string_view section, std::string_view key,
                                   std::string_view where) {
  ANVIL_FAIL("[config] {}unknown key '{}.{}' (did you mean '{}'?)", where, section, key,
             nearest_full_name(section, key));
}

// Returns "an integer" etc. for the type a field holds, for messages.
std::string_view type_description(const ConfigFieldRef& ref) {
  struct Describe {
    std::string_view operator()(int64_t*) const { return "an integer"; }
    std::string_view operator()(double*) const { return "a number"; }
    std::string_view operator()(bool*) const { return "true or false"; }
    std::string_view operator()(std::string*) const { return "a string"; }
    std::string_view operator()(std::vector<std::string>*) const { return "a list of strings"; }
    std::string_view operator()(std::vector<DataSourceSpec>*) const {
      return "a list of { path = \"dir\", weight = number } tables";
    }
  };
  return std::visit(Describe{}, ref);
}

// Returns a configuration integer within its field's range (ConfigField::wide): the one
// conversion of TOML and command-line integers, throwing "<subject> is out of range: <text>".
int64_t config_integer(int64_t value, bool wide, std::string_view subject,
                       std::string_view as_written) {
  using Wide = std::numeric_limits<int64_t>;
  using Narrow = std::numeric_limits<int32_t>;
  return checked_integer(value, wide ? Wide::min() : Narrow::min(),
                         wide ? Wide::max() : Narrow::max(), subject, as_written);
}

// Stores a TOML node into a field; returns false when the node's type does not fit, throws
// "<subject> is out of range: <value>" for a number that does not fit its field.
bool assign_toml_node(const ConfigFieldRef& ref, const toml::node& node, std::string_view subject,
                      bool wide) {
  struct Assign {
    const toml::node& node;
    std::string_view subject;
    bool wide;
    bool operator()(int64_t* out) const {
      if (!node.is_integer()) return false;
      const int64_t value = node.as_integer()->get();
      *out = config_integer(value, wide, subject, fmt::format("{}", value));
      return true;
    }
    bool operator()(double* out) const {
      if (node.is_floating_point()) {
        const double value = node.as_floating_point()->get();
        *out = checked_real(value, subject, fmt::format("{}", value));
        return true;
      }
      if (node.is_integer()) {
        *out = static_cast<double>(node.as_integer()->get());
        return true;
      }
      return false;
    }
    bool operator()(bool* out) const {
      if (!node.is_boolean()) return false;
      *out = node.as_boolean()->get();
      return true;
    }
    bool operator()(std::string* out) const {
      if (!node.is_string()) return false;
      *out = node.as_string()->get();
      return true;
    }
    bool operator()(std::vector<std::string>* out) const {
      const toml::array* array = node.as_array();
      if (!array) return false;
      std::vector<std::string> values;
      for (const toml::node& element : *array) {
        if (!element.is_string()) return false;
        values.push_back(element.as_string()->get());
      }
      *out = std::move(values);
      return true;
    }
    bool operator()(std::vector<DataSourceSpec>* out) const {
      const toml::array* array = node.as_array();
      if (!array) return false;
      std::vector<DataSourceSpec> values;
      for (const toml::node& element : *array) {
        const toml::table* table = element.as_table();
        if (!table || table->size() != 2) return false;
        const toml::node* path = table->get("path");
        const toml::node* weight = table->get("weight");
        if (!path || !path->is_string() || !weight) return false;
        DataSourceSpec spec{path->as_string()->get(), 0};
        if (!Assign{*weight, subject, wide}(&spec.weight)) return false;
        values.push_back(std::move(spec));
      }
      *out = std::move(values);
      return true;
    }
  };
  return std::visit(Assign{node, subject, wide}, ref);
}

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t");
  return text.substr(first, last - first + 1);
}

// Parses command-line text into a field; returns false when it does not fit the type, throws
// "[config] --<name> is out of range: <text>" for a number that does not fit the field.
bool assign_text(const ConfigFieldRef& ref, std::string_view name, std::string_view text,
                 bool wide) {
  struct Assign {
    std::string_view name;
    std::string_view text;
    bool wide;
    std::string subject() const { return fmt::format("[config] --{}", name); }
    bool operator()(int64_t* out) const {
      int64_t value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (end != text.data() + text.size() || text.empty()) return false;
      // A whole number past 64 bits is understood but does not fit: say so, never wrap.
      ANVIL_CHECK(error != std::errc::result_out_of_range, "{} is out of range: {}", subject(),
                  text);
      if (error != std::errc()) return false;
      *out = config_integer(value, wide, subject(), text);
      return true;
    }
    bool operator()(double* out) const {
      double value = 0;
      const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
      if (end != text.data() + text.size() || text.empty()) return false;
      ANVIL_CHECK(error != std::errc::result_out_of_range, "{} is out of range: {}", subject(),
                  text);
      if (error != std::errc()) return false;
      *out = checked_real(value, subject(), text);
      return true;
    }
    bool operator()(bool* out) const {
      if (text == "true" || text == "1") {
        *out = true;
        return true;
      }
      if (text == "false" || text == "0") {
        *out = false;
        return true;
      }
      return false;
    }
    bool operator()(std::string* out) const {
      *out = std::string(text);
      return true;
    }
    bool operator()(std::vector<std::string>* out) const {
      std::string_view body = trim(text);
      if (body.starts_with('[') && body.ends_with(']')) body = body.substr(1, body.size() - 2);
      std::vector<std::string> values;
      while (!body.empty()) {
        const auto comma = body.find(',');
        std::string_view item = trim(body.substr(0, comma));
        if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') &&
            item.back() == item.front()) {
          item = item.substr(1, item.size() - 2);
        }
        if (!item.empty()) values.emplace_back(item);
        if (comma == std::string_view::npos) break;
        body.remove_prefix(comma + 1);
      }
      *out = std::move(values);
      return true;
    }
    bool operator()(std::vector<DataSourceSpec>* out) const {
      // The value is TOML's inline-array syntax, parsed as the right side of a key.
      toml::table document;
      try {
        document = toml::parse("value = " + std::string(text));
      } catch (const toml::parse_error&) {
        return false;
      }
      return assign_toml_node(out, *document.get("value"), subject(), wide);
    }
  };
  return std::visit(Assign{name, text, wide}, ref);
}

std::string toml_quote(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string toml_value_text(const ConfigFieldRef& ref) {
  struct Format {
    std::string operator()(int64_t* value) const { return fmt::format("{}", *value); }
    std::string operator()(double* value) const {
      std::string text = fmt::format("{}", *value);
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";
      return text;
    }
    std::string operator()(bool* value) const { return *value ? "true" : "false"; }
    std::string operator()(std::string* value) const { return toml_quote(*value); }
    std::string operator()(std::vector<std::string>* values) const {
      std::string text = "[";
      for (size_t i = 0; i < values->size(); ++i) {
        if (i) text += ", ";
        text += toml_quote((*values)[i]);
      }
      return text + "]";
    }
    std::string operator()(std::vector<DataSourceSpec>* values) const {
      std::string text = "[";
      for (size_t i = 0; i < values->size(); ++i) {
        if (i) text += ", ";
        double weight = (*values)[i].weight;
        text += fmt::format("{{ path = {}, weight = {} }}", toml_quote((*values)[i].path),
                            (*this)(&weight));
      }
      return text + "]";
    }
  };
  return std::visit(Format{}, ref);
}

}  // namespace

std::string closest_name(std::string_view wanted, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const std::string& candidate : candidates) {
    const size_t distance = edit_distance(wanted, candidate);
    if (distance < best_distance) {
      best_distance = distance;
      best = candidate;
    }
  }
  return best;
}

void apply_config_toml(TrainConfig& config, std::string_view text, const std::string& source_name) {
  toml::table document;
  try {
    document = toml::parse(text, source_name);
  } catch (const toml::parse_error& error) {
    ANVIL_FAIL("[config] {}:{}:{}: {}", source_name, error.source().begin.line,
               error.source().begin.column, error.description());
  }
  const std::string where = source_name + ": ";
  for (const auto& [section_key, section_node] : document) {
    const std::string_view section = section_key.str();
    if (!section_node.is_table()) {
      ANVIL_CHECK(is_section(section),
                  "[config] {}key '{}' must be inside a section (did you mean '{}'?)", where,
                  section, nearest_full_name("", section));
      ANVIL_FAIL("[config] {}'{}' must be a section ([{}]), not a value", where, section, section);
    }
    if (!is_section(section)) fail_unknown_section(section, where);
    for (const auto& [key_name, value_node] : *section_node.as_table()) {
      const std::string_view key = key_name.str();
      const ConfigField* field = find_field(section, key);
      if (!field) fail_unknown_key(section, key, where);
      const ConfigFieldRef ref = field->ref(config);
      const std::string subject = fmt::format("[config] {}{}", where, field->full_name());
      ANVIL_CHECK(assign_toml_node(ref, value_node, subject, field->wide), "{} must be {}",
                  subject, type_description(ref));
    }
  }
}

void apply_config_file(TrainConfig& config, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ANVIL_CHECK(in.good(), "[config] cannot open config file {}", path);
  std::stringstream text;
  text << in.rdbuf();
  apply_config_toml(config, text.str(), path);
}

void apply_config_override(TrainConfig& config, std::string_view name, std::string_view value) {
  const auto dot = name.find('.');
  ANVIL_CHECK(dot != std::string_view::npos, "[config] override '{}' is not section.key", name);
  const std::string_view section = name.substr(0, dot);
  const std::string_view key = name.substr(dot + 1);
  if (!is_section(section)) fail_unknown_section(section, "--");
  const ConfigField* field = find_field(section, key);
  if (!field) fail_unknown_key(section, key, "--");
  const ConfigFieldRef ref = field->ref(config);
  ANVIL_CHECK(assign_text(ref, name, value, field->wide), "[config] --{} must be {}, got '{}'",
              name, type_description(ref), value);
}

std::vector<ConfigOverride> extract_config_overrides(std::vector<std::string>& args) {
  std::vector<ConfigOverride> overrides;
  std::vector<std::string> rest;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto equals = arg.find('=');
    const std::string flag = arg.substr(0, equals);
    const bool dotted_flag = flag.starts_with("--") && flag.find('.') != std::string::npos;
    if (!dotted_flag) {
      rest.push_back(arg);
      continue;
    }
    ConfigOverride override_arg{flag.substr(2), ""};
    if (equals != std::string::npos) {
      override_arg.value = arg.substr(equals + 1);
    } else if (i + 1 < args.size() && !args[i + 1].starts_with("--")) {
      override_arg.value = args[++i];
    } else {
      override_arg.value = "true";
    }
    overrides.push_back(std::move(override_arg));
  }
  args = std::move(rest);
  return overrides;
}

std::string config_value_text(TrainConfig& config, const ConfigField& field) {
  return toml_value_text(field.ref(config));
}

std::string config_to_toml(const TrainConfig& config) {
  TrainConfig copy = config;
  std::string out = "# anvil training configuration, resolved: every key, defaults included.\n";
  for (std::string_view section : config_sections()) {
    out += fmt::format("\n[{}]\n", section);
    for (const ConfigField& field : config_fields()) {
      if (field.section != section) continue;
      out += fmt::format("{} = {}\n", field.key, toml_value_text(field.ref(copy)));
    }
  }
  return out;
}

}  // namespace anvil
