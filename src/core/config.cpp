// Config loading: a table binds every dotted key to a field, so parsing, overriding,
// error messages and dumping all come from one list.
#include "core/config.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <variant>

#include "core/byte_size.h"
#include "core/error.h"

namespace cadre {
namespace {

std::vector<Field> config_fields(Config& c) {
  return {
      {"model.arch", &c.model.arch},
      {"data.dir", &c.data.dir},
      {"data.batch_size", &c.data.batch_size},
      {"data.workers", &c.data.workers},
      {"data.prefetch", &c.data.prefetch},
      {"data.image_size", &c.data.image_size},
      {"data.resize_size", &c.data.resize_size},
      {"data.crop_scale_min", &c.data.crop_scale_min},
      {"data.mean", &c.data.mean},
      {"data.std", &c.data.stddev},
      {"data.uint8", &c.data.uint8},
      {"data.shuffle_window", &c.data.shuffle_window},
      {"data.train_on_prompt", &c.data.train_on_prompt},
      {"optim.name", &c.optim.name},
      {"optim.lr", &c.optim.lr},
      {"optim.min_lr", &c.optim.min_lr},
      {"optim.warmup_steps", &c.optim.warmup_steps},
      {"optim.weight_decay", &c.optim.weight_decay},
      {"optim.no_decay", &c.optim.no_decay},
      {"optim.beta1", &c.optim.beta1},
      {"optim.beta2", &c.optim.beta2},
      {"optim.eps", &c.optim.eps},
      {"optim.momentum", &c.optim.momentum},
      {"optim.dampening", &c.optim.dampening},
      {"optim.nesterov", &c.optim.nesterov},
      {"optim.grad_clip", &c.optim.grad_clip},
      {"optim.grad_accum_steps", &c.optim.grad_accum_steps},
      {"train.steps", &c.train.steps},
      {"train.epochs", &c.train.epochs},
      {"train.seed", &c.train.seed},
      {"train.threads", &c.train.threads},
      {"train.device", &c.train.device},
      {"train.log_interval", &c.train.log_interval},
      {"train.eval_interval", &c.train.eval_interval},
      {"train.eval_batches", &c.train.eval_batches},
      {"train.stop_at", &c.train.stop_at},
      {"train.check_replicas", &c.train.check_replicas},
      {"train.init_from", &c.train.init_from},
      {"train.memory_limit", &c.train.memory_limit},
      {"train.freeze", &c.train.freeze},
      {"parallel.strategy", &c.parallel.strategy},
      {"parallel.shard_group_size", &c.parallel.shard_group_size},
      {"parallel.tp_size", &c.parallel.tp_size},
      {"parallel.pp_size", &c.parallel.pp_size},
      {"parallel.pp_schedule", &c.parallel.pp_schedule},
      {"parallel.pp_microbatches", &c.parallel.pp_microbatches},
      {"parallel.pp_chunks", &c.parallel.pp_chunks},
      {"parallel.pp_split", &c.parallel.pp_split},
      {"parallel.mixed_precision.param_dtype", &c.parallel.mixed_precision.param_dtype},
      {"parallel.mixed_precision.reduce_dtype", &c.parallel.mixed_precision.reduce_dtype},
      {"parallel.activation_checkpointing", &c.parallel.activation_checkpointing},
      {"parallel.prefetch", &c.parallel.prefetch},
      {"parallel.accumulate_unsharded", &c.parallel.accumulate_unsharded},
      {"parallel.wrap_min_params", &c.parallel.wrap_min_params},
      {"parallel.comm_timeout", &c.parallel.comm_timeout},
      {"lora.rank", &c.lora.rank},
      {"lora.alpha", &c.lora.alpha},
      {"lora.dropout", &c.lora.dropout},
      {"lora.targets", &c.lora.targets},
      {"lora.init_from", &c.lora.init_from},
      {"checkpoint.interval", &c.checkpoint.interval},
      {"checkpoint.keep", &c.checkpoint.keep},
      {"checkpoint.dir", &c.checkpoint.dir},
      {"checkpoint.resume", &c.checkpoint.resume},
      {"checkpoint.async", &c.checkpoint.async},
      {"checkpoint.at_end", &c.checkpoint.at_end},
      {"checkpoint.timeout_s", &c.checkpoint.timeout_s},
      {"checkpoint.memory_interval", &c.checkpoint.memory_interval},
      {"obs.metrics", &c.obs.metrics},
      {"obs.flight_recorder_entries", &c.obs.flight_recorder_entries},
      {"obs.straggler_factor", &c.obs.straggler_factor},
      {"obs.straggler_steps", &c.obs.straggler_steps},
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

bool is_dtype(const std::string& s) { return s == "float32" || s == "bfloat16"; }

// train.steps and train.epochs size the run two ways: one source may give one of them, and a
// later source's replaces an earlier one's (a --set train.steps=N over a file's epochs).
void check_run_length_keys(const std::vector<std::pair<std::string, YAML::Node>>& keys, const std::string& source,
                           Config& config) {
  bool steps = false, epochs = false;
  for (const auto& kv : keys) {
    steps = steps || kv.first == "train.steps";
    epochs = epochs || kv.first == "train.epochs";
  }
  CADRE_CONFIG_CHECK(!(steps && epochs), source, ": train.steps and train.epochs both size the run; give one");
  if (steps) config.train.epochs = 0;
}

}  // namespace

std::string ModelSection::value(const std::string& name) const {
  for (const auto& k : keys)
    if (k.key == "model." + name) return k.value;
  return "";
}

namespace {

// Model keys other than arch are the model's: kept as written, a later one replacing an
// earlier one (an override replaces the file's value).
bool model_key_set(Config& config, const std::string& key, const std::string& text, const std::string& source) {
  if (key.rfind("model.", 0) != 0 || key == "model.arch") return false;
  CADRE_CONFIG_CHECK(key.find('.', 6) == std::string::npos, source, ": key '", key,
                     "': model keys are not nested");
  for (auto& k : config.model.keys)
    if (k.key == key) {
      k = {key, text, source};
      return true;
    }
  config.model.keys.push_back({key, text, source});
  return true;
}

// `deploy.*` keys are kept as written for `cadre deploy` to check (src/deploy/job_spec.cpp).
bool deploy_key_set(Config& config, const std::string& key, const std::string& text) {
  if (key.rfind("deploy.", 0) != 0) return false;
  config.deploy[key.substr(7)] = text;
  return true;
}

}  // namespace

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
    check_run_length_keys(flat, source, config);
    for (const auto& [key, value] : flat) {
      if (value.IsNull()) throw ConfigError(str(source, ": key '", key, "' has no value"));
      if (!value.IsScalar()) throw ConfigError(str(source, ": key '", key, "' expects a scalar, got a non-scalar value"));
      if (model_key_set(config, key, value.Scalar(), source) || deploy_key_set(config, key, value.Scalar())) continue;
      field_assign(field_find(fields, key, source), value.Scalar(), source);
    }
  }
  std::vector<std::pair<std::string, YAML::Node>> set_keys;
  for (const auto& item : overrides)
    if (item.find('=') != std::string::npos) set_keys.emplace_back(item.substr(0, item.find('=')), YAML::Node());
  check_run_length_keys(set_keys, "--set", config);
  for (const auto& item : overrides) {
    auto eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw ConfigError(str("--set '", item, "': expected section.key=value"));
    std::string key = item.substr(0, eq);
    std::string text = item.substr(eq + 1);
    YAML::Node value;
    try {
      value = YAML::Load(text);
    } catch (const YAML::Exception& e) {
      throw ConfigError(str("--set ", key, ": cannot parse value '", text, "'"));
    }
    // An empty override sets an empty string (e.g. checkpoint.dir=).
    if (value.IsNull()) value = YAML::Node(std::string());
    if (!value.IsScalar()) throw ConfigError(str("--set ", key, ": expects a scalar, got '", text, "'"));
    if (model_key_set(config, key, value.Scalar(), "--set") || deploy_key_set(config, key, value.Scalar())) continue;
    field_assign(field_find(fields, key, "--set"), value.Scalar(), "--set");
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

namespace {

// The optimizer's name and the keys that belong to it: a key of the other optimizer set to
// anything but its default would be silently ignored, so it is refused. The SGD rules are
// torch.optim.SGD's (which raises on negative momentum, and on Nesterov without momentum or
// with dampening), plus momentum < 1 and dampening in [0, 1], outside which the buffer grows
// without bound or flips sign.
void optim_validate(const OptimConfig& o) {
  const OptimConfig defaults;
  CADRE_CONFIG_CHECK(o.name == "adamw" || o.name == "sgd", "optim.name: unknown '", o.name, "' (adamw, sgd)");
  CADRE_CONFIG_CHECK(o.no_decay == "norm_and_bias" || o.no_decay == "none", "optim.no_decay: unknown '", o.no_decay,
                     "' (norm_and_bias, none)");
  if (o.name == "adamw") {
    CADRE_CONFIG_CHECK(o.momentum == defaults.momentum, "optim.momentum applies to optim.name sgd (this is adamw; "
                       "its momentum is optim.beta1)");
    CADRE_CONFIG_CHECK(o.dampening == defaults.dampening, "optim.dampening applies to optim.name sgd (this is adamw)");
    CADRE_CONFIG_CHECK(o.nesterov == defaults.nesterov, "optim.nesterov applies to optim.name sgd (this is adamw)");
    return;
  }
  CADRE_CONFIG_CHECK(o.beta1 == defaults.beta1, "optim.beta1 applies to optim.name adamw (this is sgd; its momentum "
                     "is optim.momentum)");
  CADRE_CONFIG_CHECK(o.beta2 == defaults.beta2, "optim.beta2 applies to optim.name adamw (this is sgd)");
  CADRE_CONFIG_CHECK(o.eps == defaults.eps, "optim.eps applies to optim.name adamw (this is sgd)");
  CADRE_CONFIG_CHECK(o.momentum >= 0 && o.momentum < 1, "optim.momentum must be in [0, 1), got ", o.momentum);
  CADRE_CONFIG_CHECK(o.dampening >= 0 && o.dampening <= 1, "optim.dampening must be in [0, 1], got ", o.dampening);
  CADRE_CONFIG_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                     "optim.nesterov needs optim.momentum > 0 and optim.dampening = 0 (as torch.optim.SGD), got "
                     "momentum ", o.momentum, " and dampening ", o.dampening);
}

}  // namespace

void config_validate(const Config& c) {
  CADRE_CONFIG_CHECK(!c.model.arch.empty(), "model.arch must name a model");
  CADRE_CONFIG_CHECK(c.data.batch_size > 0, "data.batch_size must be positive");
  if (!c.train.memory_limit.empty()) parse_byte_size(c.train.memory_limit, "train.memory_limit");
  if (!c.train.freeze.empty()) {
    try {
      const std::regex compiled(c.train.freeze, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      throw ConfigError(str("train.freeze: '", c.train.freeze, "' is not a regular expression: ", e.what()));
    }
  }
  CADRE_CONFIG_CHECK(c.data.workers >= 0, "data.workers must be >= 0 (0: from the cores), got ", c.data.workers);
  CADRE_CONFIG_CHECK(c.data.prefetch >= 1, "data.prefetch must be >= 1, got ", c.data.prefetch);
  CADRE_CONFIG_CHECK(c.data.image_size >= 1 && c.data.resize_size >= c.data.image_size,
                     "data.image_size must be >= 1 and data.resize_size >= data.image_size, got ", c.data.image_size,
                     " and ", c.data.resize_size);
  CADRE_CONFIG_CHECK(c.data.crop_scale_min > 0 && c.data.crop_scale_min <= 1, "data.crop_scale_min must be in (0, 1], got ",
                     c.data.crop_scale_min);
  CADRE_CONFIG_CHECK(c.data.shuffle_window >= 1, "data.shuffle_window must be >= 1, got ", c.data.shuffle_window);

  const auto& o = c.optim;
  optim_validate(o);
  CADRE_CONFIG_CHECK(o.lr > 0 && o.min_lr >= 0 && o.min_lr <= o.lr, "optim.lr must be > 0 and 0 <= optim.min_lr <= optim.lr");
  CADRE_CONFIG_CHECK(o.warmup_steps >= 0, "optim.warmup_steps must be >= 0");
  CADRE_CONFIG_CHECK(o.weight_decay >= 0, "optim.weight_decay must be >= 0");
  CADRE_CONFIG_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "optim.beta1 and optim.beta2 must be in [0, 1)");
  CADRE_CONFIG_CHECK(o.eps > 0, "optim.eps must be positive");
  CADRE_CONFIG_CHECK(o.grad_clip >= 0, "optim.grad_clip must be >= 0 (0 disables clipping)");
  CADRE_CONFIG_CHECK(o.grad_accum_steps >= 1, "optim.grad_accum_steps must be >= 1");

  const auto& t = c.train;
  CADRE_CONFIG_CHECK(t.steps >= 0, "train.steps must be >= 0 (0: load the model, report its memory per rank and stop)");
  CADRE_CONFIG_CHECK(t.threads >= 1, "train.threads must be >= 1");
  CADRE_CONFIG_CHECK(t.device == "cpu" || t.device == "cuda" || t.device == "auto", "train.device: '", t.device,
                     "' is not cpu, cuda or auto");
  CADRE_CONFIG_CHECK(t.log_interval >= 1, "train.log_interval must be >= 1");
  CADRE_CONFIG_CHECK(t.eval_interval >= 0, "train.eval_interval must be >= 0");
  CADRE_CONFIG_CHECK(t.eval_batches >= 0, "train.eval_batches must be >= 0 (0: the whole validation split)");

  const auto& p = c.parallel;
  CADRE_CONFIG_CHECK(p.shard_group_size >= 0, "parallel.shard_group_size must be >= 0");
  CADRE_CONFIG_CHECK(p.tp_size >= 1, "parallel.tp_size must be >= 1 (1: no tensor parallelism), got ", p.tp_size);
  CADRE_CONFIG_CHECK(p.pp_size >= 1, "parallel.pp_size must be >= 1 (1: no pipeline), got ", p.pp_size);
  CADRE_CONFIG_CHECK(p.pp_microbatches >= 0 && (p.pp_microbatches == 0 || o.grad_accum_steps % p.pp_microbatches == 0),
                     "parallel.pp_microbatches ", p.pp_microbatches, " does not divide optim.grad_accum_steps ",
                     o.grad_accum_steps, " (0: one pipeline micro-batch per accumulation step)");
  CADRE_CONFIG_CHECK(p.pp_chunks >= 0, "parallel.pp_chunks must be >= 0 (0: the schedule's), got ", p.pp_chunks);
  CADRE_CONFIG_CHECK(p.wrap_min_params >= 0, "parallel.wrap_min_params must be >= 0 (0: one unit per block)");
  CADRE_CONFIG_CHECK(p.comm_timeout > 0, "parallel.comm_timeout must be > 0 seconds, got ", p.comm_timeout);
  CADRE_CONFIG_CHECK(p.strategy == Strategy::HybridShard || p.shard_group_size == 0,
                     "parallel.shard_group_size applies only to HYBRID_SHARD (strategy is ", strategy_name(p.strategy),
                     ")");
  CADRE_CONFIG_CHECK(is_dtype(p.mixed_precision.param_dtype),
                     "parallel.mixed_precision.param_dtype: '", p.mixed_precision.param_dtype,
                     "' is not float32 or bfloat16");
  CADRE_CONFIG_CHECK(is_dtype(p.mixed_precision.reduce_dtype),
                     "parallel.mixed_precision.reduce_dtype: '", p.mixed_precision.reduce_dtype,
                     "' is not float32 or bfloat16");

  CADRE_CONFIG_CHECK(c.lora.rank >= 0, "lora.rank must be >= 0 (0: no adapters), got ", c.lora.rank);
  CADRE_CONFIG_CHECK(c.lora.alpha > 0, "lora.alpha must be > 0, got ", c.lora.alpha);
  CADRE_CONFIG_CHECK(c.lora.dropout >= 0 && c.lora.dropout < 1, "lora.dropout must be in [0, 1), got ", c.lora.dropout);

  CADRE_CONFIG_CHECK(c.checkpoint.interval >= 0, "checkpoint.interval must be >= 0");
  CADRE_CONFIG_CHECK(c.checkpoint.keep >= 1, "checkpoint.keep must be >= 1");
  CADRE_CONFIG_CHECK(c.checkpoint.timeout_s > 0, "checkpoint.timeout_s must be > 0");
  CADRE_CONFIG_CHECK(c.checkpoint.memory_interval >= 1, "checkpoint.memory_interval must be >= 1");
  CADRE_CONFIG_CHECK(!c.checkpoint.resume.empty(), "checkpoint.resume must be none, auto or a checkpoint path");
  CADRE_CONFIG_CHECK(t.epochs >= 0, "train.epochs must be >= 0 (0: train.steps sizes the run)");
  // With epochs the steps are known when the run starts (train/epochs.h checks stop_at then).
  CADRE_CONFIG_CHECK(c.train.stop_at >= 0 && (t.epochs > 0 || c.train.stop_at <= c.train.steps),
                     "train.stop_at must be in [0, train.steps=", c.train.steps, "], got ", c.train.stop_at);
  CADRE_CONFIG_CHECK(c.obs.flight_recorder_entries >= 0 && c.obs.flight_recorder_entries <= 1000000,
                     "obs.flight_recorder_entries must be in [0, 1000000] (0 turns the recorder off), got ",
                     c.obs.flight_recorder_entries);
  CADRE_CONFIG_CHECK(c.obs.straggler_factor == 0 || c.obs.straggler_factor > 1,
                     "obs.straggler_factor must be above 1 (or 0 to turn straggler tracking off), got ",
                     c.obs.straggler_factor);
  CADRE_CONFIG_CHECK(c.obs.straggler_steps >= 1, "obs.straggler_steps must be >= 1, got ", c.obs.straggler_steps);
  CADRE_CONFIG_CHECK(!c.run.dir.empty(), "run.dir must not be empty");
}

std::string config_to_yaml(const Config& config) {
  Config copy = config;
  std::vector<RawKey> keys = fields_dump(config_fields(copy), "");
  // One of the two keys that size the run: epochs when they did (the steps follow from them).
  const std::string unused = config.train.epochs > 0 ? "train.steps" : "train.epochs";
  keys.erase(std::remove_if(keys.begin(), keys.end(), [&](const RawKey& k) { return k.key == unused; }), keys.end());
  keys.insert(keys.begin() + 1, copy.model.keys.begin(), copy.model.keys.end());  // after model.arch
  for (const auto& [key, value] : copy.deploy) keys.push_back({"deploy." + key, value, ""});
  YAML::Node root;
  for (const auto& k : keys) {
    // Walk/create the nested maps for the dotted key.
    std::vector<std::string> parts;
    std::stringstream ss(k.key);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    // yaml-cpp creates nested maps only through one chained operator[] expression.
    if (parts.size() == 2) root[parts[0]][parts[1]] = k.value;
    else root[parts[0]][parts[1]][parts[2]] = k.value;
  }
  YAML::Emitter out;
  out << root;
  return std::string(out.c_str()) + "\n";
}

}  // namespace cadre
