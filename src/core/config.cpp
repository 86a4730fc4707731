// Config loading: a table binds every dotted key to a field, so parsing, overriding,
// error messages and dumping all come from one list.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>
#include <variant>

#include "core/error.h"

namespace cadre {
namespace {

using FieldPtr = std::variant<int64_t*, double*, bool*, std::string*>;

struct Field {
  std::string key;
  FieldPtr ptr;
};

std::vector<Field> config_fields(Config& c) {
  return {
      {"model.arch", &c.model.arch},
      {"model.dim", &c.model.dim},
      {"model.n_layers", &c.model.n_layers},
      {"model.n_heads", &c.model.n_heads},
      {"model.n_kv_heads", &c.model.n_kv_heads},
      {"model.vocab_size", &c.model.vocab_size},
      {"model.ffn_dim", &c.model.ffn_dim},
      {"model.multiple_of", &c.model.multiple_of},
      {"model.max_seq_len", &c.model.max_seq_len},
      {"model.norm_eps", &c.model.norm_eps},
      {"model.rope_theta", &c.model.rope_theta},
      {"model.tie_embeddings", &c.model.tie_embeddings},
      {"model.init_std", &c.model.init_std},
      {"data.dir", &c.data.dir},
      {"data.batch_size", &c.data.batch_size},
      {"optim.lr", &c.optim.lr},
      {"optim.min_lr", &c.optim.min_lr},
      {"optim.warmup_steps", &c.optim.warmup_steps},
      {"optim.weight_decay", &c.optim.weight_decay},
      {"optim.beta1", &c.optim.beta1},
      {"optim.beta2", &c.optim.beta2},
      {"optim.eps", &c.optim.eps},
      {"optim.grad_clip", &c.optim.grad_clip},
      {"optim.grad_accum_steps", &c.optim.grad_accum_steps},
      {"train.steps", &c.train.steps},
      {"train.seed", &c.train.seed},
      {"train.threads", &c.train.threads},
      {"train.log_interval", &c.train.log_interval},
      {"train.eval_interval", &c.train.eval_interval},
      {"train.eval_batches", &c.train.eval_batches},
      {"train.stop_at", &c.train.stop_at},
      {"parallel.strategy", &c.parallel.strategy},
      {"parallel.shard_group_size", &c.parallel.shard_group_size},
      {"parallel.mixed_precision.param_dtype", &c.parallel.mixed_precision.param_dtype},
      {"parallel.mixed_precision.reduce_dtype", &c.parallel.mixed_precision.reduce_dtype},
      {"parallel.activation_checkpointing", &c.parallel.activation_checkpointing},
      {"parallel.prefetch", &c.parallel.prefetch},
      {"parallel.wrap_min_params", &c.parallel.wrap_min_params},
      {"parallel.comm_timeout", &c.parallel.comm_timeout},
      {"checkpoint.interval", &c.checkpoint.interval},
      {"checkpoint.keep", &c.checkpoint.keep},
      {"checkpoint.dir", &c.checkpoint.dir},
      {"checkpoint.resume", &c.checkpoint.resume},
      {"checkpoint.async", &c.checkpoint.async},
      {"checkpoint.timeout_s", &c.checkpoint.timeout_s},
      {"run.dir", &c.run.dir},
  };
}

// Flattens nested mappings into dotted keys; leaves (scalars, sequences, nulls) are values.
// Keys must be scalars, and nesting is bounded: an alias may make a mapping contain itself
// (`a: &x {b: *x}`), which would otherwise recurse until the stack overflows.
void flatten(const YAML::Node& node, const std::string& prefix, const std::string& source,
             std::vector<std::pair<std::string, YAML::Node>>& out, int depth = 0) {
  constexpr int kMaxDepth = 8;  // sections are two or three levels deep
  if (node.IsMap()) {
    if (depth >= kMaxDepth)
      throw ConfigError(str(source, ": key '", prefix, "' is nested more than ", kMaxDepth,
                            " levels deep (a mapping that contains itself through an alias?)"));
    for (const auto& kv : node) {
      if (!kv.first.IsScalar())
        throw ConfigError(str(source, ": a key ", prefix.empty() ? "at top level" : "under '" + prefix + "'",
                              " is not a plain name (a sequence or mapping used as a key)"));
      const std::string& key = kv.first.Scalar();
      flatten(kv.second, prefix.empty() ? key : prefix + "." + key, source, out, depth + 1);
    }
  } else {
    out.emplace_back(prefix, node);
  }
}

void assign(const Field& field, const YAML::Node& value, const std::string& source) {
  auto bad = [&](const char* expected) {
    std::string shown = value.IsScalar() ? "'" + value.Scalar() + "'" : "a non-scalar value";
    throw ConfigError(str(source, ": key '", field.key, "' expects ", expected, ", got ", shown));
  };
  if (!value.IsScalar()) bad("a scalar");
  const std::string& text = value.Scalar();
  std::visit(
      [&](auto* ptr) {
        using T = std::remove_pointer_t<decltype(ptr)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *ptr = text;
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "True") *ptr = true;
          else if (text == "false" || text == "False") *ptr = false;
          else bad("true or false");
        } else if constexpr (std::is_same_v<T, int64_t>) {
          size_t used = 0;
          long long v = 0;
          try { v = std::stoll(text, &used); } catch (const std::exception&) { bad("an integer"); }
          if (used != text.size()) bad("an integer");
          *ptr = v;
        } else {
          size_t used = 0;
          double v = 0;
          try { v = std::stod(text, &used); } catch (const std::exception&) { bad("a finite number"); }
          // inf and nan would pass range checks such as `> 0` (or fail them with a misleading message).
          if (used != text.size() || !std::isfinite(v)) bad("a finite number");
          *ptr = v;
        }
      },
      field.ptr);
}

const Field& find_field(const std::vector<Field>& fields, const std::string& key,
                        const std::string& source) {
  for (const auto& f : fields)
    if (f.key == key) return f;
  // Name the section's keys so a typo is easy to fix.
  std::string section = key.substr(0, key.find('.'));
  std::string known;
  for (const auto& f : fields)
    if (f.key.compare(0, section.size() + 1, section + ".") == 0) known += " " + f.key;
  if (known.empty()) {
    for (const auto& f : fields) {
      std::string s = f.key.substr(0, f.key.find('.'));
      if (known.find(" " + s + " ") == std::string::npos) known += " " + s + " ";
    }
    throw ConfigError(str(source, ": unknown section in key '", key, "'; sections are:", known));
  }
  throw ConfigError(str(source, ": unknown key '", key, "'; keys in '", section, "' are:", known));
}

bool is_dtype(const std::string& s) { return s == "float32" || s == "bfloat16"; }

}  // namespace

int64_t model_ffn_dim(const ModelConfig& m) {
  if (m.ffn_dim > 0) return m.ffn_dim;
  int64_t hidden = 2 * (4 * m.dim) / 3;
  return m.multiple_of * ((hidden + m.multiple_of - 1) / m.multiple_of);
}

Config config_parse(const std::string& yaml_text, const std::string& source,
                    const std::vector<std::string>& overrides) {
  Config config;
  auto fields = config_fields(config);
  YAML::Node root;
  try {
    root = YAML::Load(yaml_text);
  } catch (const YAML::Exception& e) {
    throw ConfigError(str(source, ": invalid YAML: ", e.what()));
  }
  if (root.IsDefined() && !root.IsNull()) {
    if (!root.IsMap()) throw ConfigError(str(source, ": expected a mapping of sections at top level"));
    std::vector<std::pair<std::string, YAML::Node>> flat;
    flatten(root, "", source, flat);
    for (const auto& [key, value] : flat) {
      if (value.IsNull()) throw ConfigError(str(source, ": key '", key, "' has no value"));
      assign(find_field(fields, key, source), value, source);
    }
  }
  for (const auto& item : overrides) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(str("--set '", item, "': expected section.key=value"));
    std::string key = item.substr(0, eq);
    std::string text = item.substr(eq + 1);
    const Field& field = find_field(fields, key, "--set");
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(str("--set ", key, ": cannot parse value '", text, "'"));
    }
    // An empty override sets an empty string (e.g. checkpoint.dir=).
    if (value.IsNull()) value = YAML::Node(std::string());
    assign(field, value, "--set");
  }
  config_validate(config);
  return config;
}

Config config_load(const std::string& path, const std::vector<std::string>& overrides) {
  std::ifstream in(path);
  if (!in) throw ConfigError(str("config file '", path, "' cannot be read"));
  std::stringstream text;
  text << in.rdbuf();
  return config_parse(text.str(), path, overrides);
}

void config_validate(const Config& c) {
  const auto& m = c.model;
  CADRE_CONFIG_CHECK(m.arch == "llama", "model.arch: unknown architecture '", m.arch, "' (known: llama)");
  CADRE_CONFIG_CHECK(m.dim > 0 && m.n_layers > 0 && m.n_heads > 0 && m.n_kv_heads > 0,
                     "model.dim, n_layers, n_heads and n_kv_heads must be positive");
  CADRE_CONFIG_CHECK(m.dim % m.n_heads == 0, "model.dim (", m.dim, ") must be divisible by model.n_heads (",
                     m.n_heads, ")");
  CADRE_CONFIG_CHECK((m.dim / m.n_heads) % 2 == 0, "model.dim / model.n_heads must be even for rotary embeddings");
  CADRE_CONFIG_CHECK(m.n_kv_heads <= m.n_heads && m.n_heads % m.n_kv_heads == 0,
                     "model.n_kv_heads (", m.n_kv_heads, ") must divide model.n_heads (", m.n_heads, ")");
  CADRE_CONFIG_CHECK(m.vocab_size > 0, "model.vocab_size must be positive");
  CADRE_CONFIG_CHECK(m.max_seq_len > 0, "model.max_seq_len must be positive");
  CADRE_CONFIG_CHECK(m.ffn_dim >= 0 && m.multiple_of > 0, "model.ffn_dim must be >= 0 and model.multiple_of > 0");
  CADRE_CONFIG_CHECK(m.norm_eps > 0 && m.rope_theta > 0 && m.init_std > 0,
                     "model.norm_eps, model.rope_theta and model.init_std must be positive");

  CADRE_CONFIG_CHECK(c.data.batch_size > 0, "data.batch_size must be positive");

  const auto& o = c.optim;
  CADRE_CONFIG_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr, "optim.lr must be > 0 and 0 <= optim.min_lr <= optim.lr");
  CADRE_CONFIG_CHECK(o.warmup_steps >= 0, "optim.warmup_steps must be >= 0");
  CADRE_CONFIG_CHECK(o.weight_decay >= 0, "optim.weight_decay must be >= 0");
  CADRE_CONFIG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "optim.beta1 and optim.beta2 must be in [0, 1)");
  CADRE_CONFIG_CHECK(o.eps > 0, "optim.eps must be positive");
  CADRE_CONFIG_CHECK(o.grad_clip >= 0, "optim.grad_clip must be >= 0 (0 disables clipping)");
  CADRE_CONFIG_CHECK(o.grad_accum_steps >= 1, "optim.grad_accum_steps must be >= 1");

  const auto& t = c.train;
  CADRE_CONFIG_CHECK(t.steps >= 1, "train.steps must be >= 1");
  CADRE_CONFIG_CHECK(t.threads >= 1, "train.threads must be >= 1");
  CADRE_CONFIG_CHECK(t.log_interval >= 1, "train.log_interval must be >= 1");
  CADRE_CONFIG_CHECK(t.eval_interval >= 0, "train.eval_interval must be >= 0");
  CADRE_CONFIG_CHECK(t.eval_batches >= 1, "train.eval_batches must be >= 1");

  const auto& p = c.parallel;
  CADRE_CONFIG_CHECK(p.strategy == "FULL_SHARD" || p.strategy == "SHARD_GRAD_OP" ||
                         p.strategy == "HYBRID_SHARD" || p.strategy == "NO_SHARD",
                     "parallel.strategy: unknown '", p.strategy,
                     "' (FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, NO_SHARD)");
  CADRE_CONFIG_CHECK(p.shard_group_size >= 0, "parallel.shard_group_size must be >= 0");
  CADRE_CONFIG_CHECK(p.wrap_min_params >= 0, "parallel.wrap_min_params must be >= 0 (0: one unit per block)");
  CADRE_CONFIG_CHECK(p.comm_timeout > 0, "parallel.comm_timeout must be > 0 seconds, got ", p.comm_timeout);
  CADRE_CONFIG_CHECK(p.strategy == "HYBRID_SHARD" || p.shard_group_size == 0,
                     "parallel.shard_group_size applies only to HYBRID_SHARD (strategy is ", p.strategy, ")");
  CADRE_CONFIG_CHECK(is_dtype(p.mixed_precision.param_dtype),
                     "parallel.mixed_precision.param_dtype: '", p.mixed_precision.param_dtype,
                     "' is not float32 or bfloat16");
  CADRE_CONFIG_CHECK(is_dtype(p.mixed_precision.reduce_dtype),
                     "parallel.mixed_precision.reduce_dtype: '", p.mixed_precision.reduce_dtype,
                     "' is not float32 or bfloat16");

  CADRE_CONFIG_CHECK(c.checkpoint.interval >= 0, "checkpoint.interval must be >= 0");
  CADRE_CONFIG_CHECK(c.checkpoint.keep >= 1, "checkpoint.keep must be >= 1");
  CADRE_CONFIG_CHECK(c.checkpoint.timeout_s > 0, "checkpoint.timeout_s must be > 0");
  CADRE_CONFIG_CHECK(!c.checkpoint.resume.empty(), "checkpoint.resume must be none, auto or a checkpoint path");
  CADRE_CONFIG_CHECK(c.train.stop_at >= 0 && c.train.stop_at <= c.train.steps, "train.stop_at must be in [0, train.steps=",
                     c.train.steps, "], got ", c.train.stop_at);
  CADRE_CONFIG_CHECK(!c.run.dir.empty(), "run.dir must not be empty");
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;
  YAML::Node root;
  for (const auto& field : config_fields(copy)) {
    // Walk/create the nested maps for the dotted key.
    std::vector<std::string> parts;
    std::stringstream ss(field.key);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    // yaml-cpp creates nested maps only through one chained operator[] expression.
    std::visit(
        [&](auto* ptr) {
          if (parts.size() == 2) root[parts[0]][parts[1]] = *ptr;
          else root[parts[0]][parts[1]][parts[2]] = *ptr;
        },
        field.ptr);
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace cadre
