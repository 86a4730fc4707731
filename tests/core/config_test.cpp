// Config loading: defaults, overrides, and the error messages for bad input. The `model:`
// keys belong to the model (models/registry.h resolves them), so parsing here goes on to
// model_config_resolve as `cadre train` does.
#include <gtest/gtest.h>

#include "core/config.h"
#include "core/error.h"
#include "models/llama/config.h"
#include "models/resnet/config.h"
#include "models/registry.h"

using cadre::Config;
using cadre::ConfigError;

namespace {
// config_parse + the model's own keys, as `cadre train` loads a config.
Config config_parse(const std::string& yaml, const std::string& source, const std::vector<std::string>& overrides) {
  Config c = cadre::config_parse(yaml, source, overrides);
  cadre::model_config_resolve(c);
  return c;
}
cadre::LlamaConfig llama(const Config& c) { return cadre::llama_config(c.model); }

// Returns the ConfigError message produced by parsing, or "" if parsing succeeded.
std::string parse_error(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    config_parse(yaml, "test.yaml", overrides);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(Config, FileValuesAndOverrides) {
  Config c = config_parse("model:\n  dim: 64\n  n_heads: 4\n  n_kv_heads: 4\ntrain:\n  steps: 7\n", "t.yaml",
                          {"train.steps=9", "optim.lr=0.001", "parallel.mixed_precision.param_dtype=bfloat16"});
  EXPECT_EQ(llama(c).dim, 64);
  EXPECT_EQ(llama(c).n_heads, 4);
  EXPECT_EQ(c.train.steps, 9);
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.001);
  EXPECT_EQ(c.parallel.mixed_precision.param_dtype, "bfloat16");
}

TEST(Config, UnknownKeyNamesKeyAndFile) {
  std::string msg = parse_error("model:\n  dimm: 64\n");
  EXPECT_NE(msg.find("model.dimm"), std::string::npos) << msg;
  EXPECT_NE(msg.find("test.yaml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.dim"), std::string::npos) << msg;  // lists the valid keys
}

TEST(Config, UnknownSection) {
  std::string msg = parse_error("modle:\n  dim: 64\n");
  EXPECT_NE(msg.find("modle.dim"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesKey) {
  std::string msg = parse_error("train:\n  steps: many\n");
  EXPECT_NE(msg.find("train.steps"), std::string::npos) << msg;
  EXPECT_NE(msg.find("integer"), std::string::npos) << msg;
  msg = parse_error("", {"model.tie_embeddings=maybe"});
  EXPECT_NE(msg.find("model.tie_embeddings"), std::string::npos) << msg;
  msg = parse_error("", {"optim.lr=1e-3x"});
  EXPECT_NE(msg.find("optim.lr"), std::string::npos) << msg;
}

TEST(Config, BadOverrideSyntax) {
  EXPECT_NE(parse_error("", {"train.steps"}).find("section.key=value"), std::string::npos);
  EXPECT_NE(parse_error("", {"train.stepz=3"}).find("train.stepz"), std::string::npos);
}

TEST(Config, CrossFieldValidation) {
  EXPECT_NE(parse_error("model:\n  dim: 100\n  n_heads: 8\n").find("divisible"), std::string::npos);
  EXPECT_NE(parse_error("model:\n  n_heads: 8\n  n_kv_heads: 3\n").find("n_kv_heads"), std::string::npos);
  EXPECT_NE(parse_error("parallel:\n  strategy: ZERO3\n").find("parallel.strategy"), std::string::npos);
  EXPECT_NE(parse_error("parallel:\n  shard_group_size: 2\n").find("HYBRID_SHARD"), std::string::npos);
  EXPECT_NE(parse_error("", {"parallel.mixed_precision.param_dtype=fp8"}).find("param_dtype"), std::string::npos);
  EXPECT_NE(parse_error("", {"parallel.comm_timeout=0"}).find("parallel.comm_timeout"), std::string::npos);
}

TEST(Config, DumpRoundTrips) {
  Config a = config_parse("model:\n  dim: 96\n  n_heads: 6\n  n_kv_heads: 2\n", "t.yaml", {"run.dir=/tmp/x"});
  Config b = config_parse(cadre::config_to_yaml(a), "dump.yaml", {});
  EXPECT_EQ(cadre::config_to_yaml(a), cadre::config_to_yaml(b));
  EXPECT_EQ(llama(b).dim, 96);
  EXPECT_EQ(llama(b).n_kv_heads, 2);
  EXPECT_EQ(b.run.dir, "/tmp/x");
}

// train.steps and train.epochs: one per source, a later source's replacing the other, and the
// dump keeping the one that sized the run (a run's config.yaml loads again).
TEST(Config, StepsOrEpochsSizeTheRun) {
  EXPECT_NE(parse_error("train:\n  steps: 5\n  epochs: 2\n").find("train.steps and train.epochs both size the run"),
            std::string::npos);
  Config epochs = config_parse("train:\n  steps: 5\n", "t.yaml", {"train.epochs=2"});
  EXPECT_EQ(epochs.train.epochs, 2);
  Config steps = config_parse("train:\n  epochs: 2\n", "t.yaml", {"train.steps=7"});
  EXPECT_EQ(steps.train.epochs, 0);
  EXPECT_EQ(steps.train.steps, 7);
  const std::string dumped = cadre::config_to_yaml(epochs);
  EXPECT_EQ(dumped.find("\n  steps: 5"), std::string::npos) << dumped;
  EXPECT_EQ(config_parse(dumped, "dump.yaml", {}).train.epochs, 2);
  EXPECT_EQ(config_parse(cadre::config_to_yaml(steps), "dump.yaml", {}).train.steps, 7);
  EXPECT_NE(parse_error("train:\n  epochs: -1\n").find("train.epochs must be >= 0"), std::string::npos);
}

TEST(Config, LlamaFfnRule) {
  cadre::LlamaConfig m;
  m.dim = 512;
  m.multiple_of = 256;
  EXPECT_EQ(cadre::llama_ffn_dim(m), 1536);  // 2/3*2048 = 1365 -> 1536
  m.ffn_dim = 1000;
  EXPECT_EQ(cadre::llama_ffn_dim(m), 1000);
}

TEST(Config, DeploySectionIsKeptAsTextForCadreDeploy) {
  Config c = config_parse("deploy:\n  nodes: \"2:4\"\n  image: reg/cadre:1\n", "t.yaml", {"deploy.nodes=1:8"});
  EXPECT_EQ(c.deploy.at("nodes"), "1:8");  // --set wins over the file
  EXPECT_EQ(c.deploy.at("image"), "reg/cadre:1");
  // The resolved dump keeps the section, so the run directory's config.yaml still loads.
  Config again = config_parse(cadre::config_to_yaml(c), "dump.yaml", {});
  EXPECT_EQ(again.deploy, c.deploy);
  EXPECT_NE(parse_error("deploy:\n  nodes: [1, 2]\n").find("key 'deploy.nodes' expects a scalar"), std::string::npos);
}

// inf and nan pass checks such as `> 0`: every number field refuses them by name, in the file
// and in --set, whatever section the key belongs to.
TEST(Config, NonFiniteNumbersAreRefusedNamingTheKey) {
  for (const char* value : {"inf", "-inf", "nan", "NaN", "infinity", "1e999"}) {
    std::string msg = parse_error(std::string("parallel:\n  comm_timeout: ") + value + "\n");
    EXPECT_NE(msg.find("parallel.comm_timeout"), std::string::npos) << value << ": " << msg;
    EXPECT_NE(msg.find("finite number"), std::string::npos) << value << ": " << msg;
    msg = parse_error("", {std::string("optim.lr=") + value});
    EXPECT_NE(msg.find("optim.lr"), std::string::npos) << value << ": " << msg;
  }
}

// Non-scalar YAML where a name or value belongs is bad input (ConfigError, exit 2), never a
// yaml-cpp exception or a crash.
TEST(Config, NonScalarKeysAndValuesAreConfigErrors) {
  struct Case {
    const char* yaml;
    const char* names;
  };
  for (const Case& c : {Case{"[1, 2]: 3\n", "top level"}, Case{"model:\n  ? [a, b]\n  : 1\n", "under 'model'"},
                        Case{"model: {? {x: 1} : 2}\n", "under 'model'"}, Case{"optim:\n  lr: [1, 2]\n", "optim.lr"},
                        Case{"optim:\n  lr: {a: 1}\n", "optim.lr"}}) {
    std::string msg;
    EXPECT_NO_THROW(msg = parse_error(c.yaml)) << c.yaml;
    EXPECT_NE(msg.find(c.names), std::string::npos) << c.yaml << ": " << msg;
    EXPECT_NE(msg.find("test.yaml"), std::string::npos) << c.yaml << ": " << msg;
  }
}

// An alias can make a mapping contain itself; flattening it must end with an error, not
// recurse until the stack overflows.
TEST(Config, SelfReferentialAliasIsAnErrorNotACrash) {
  std::string msg = parse_error("model: &m\n  dim: *m\n");
  EXPECT_NE(msg.find("nested more than"), std::string::npos) << msg;
}

// optim.name picks the optimizer; each bad SGD setting (what torch.optim.SGD refuses, and
// momentum >= 1) and a key of the other optimizer name the key at fault.
TEST(Config, OptimizerKeysAreCheckedAgainstTheChosenOptimizer) {
  Config c = config_parse("", "t.yaml", {"optim.name=sgd", "optim.momentum=0.9", "optim.nesterov=true"});
  EXPECT_EQ(c.optim.name, "sgd");
  EXPECT_DOUBLE_EQ(c.optim.momentum, 0.9);
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_EQ(c.optim.no_decay, "norm_and_bias");
  EXPECT_EQ(config_parse("", "t.yaml", {}).optim.name, "adamw");  // nothing existing changes
  const std::vector<std::pair<std::vector<std::string>, std::string>> bad = {
      {{"optim.name=lamb"}, "optim.name"},
      {{"optim.no_decay=norms"}, "optim.no_decay"},
      {{"optim.name=sgd", "optim.momentum=-0.1"}, "optim.momentum"},
      {{"optim.name=sgd", "optim.momentum=1"}, "optim.momentum"},
      {{"optim.name=sgd", "optim.dampening=1.5"}, "optim.dampening"},
      {{"optim.name=sgd", "optim.nesterov=true"}, "optim.nesterov"},  // no momentum
      {{"optim.name=sgd", "optim.momentum=0.9", "optim.dampening=0.1", "optim.nesterov=true"}, "optim.nesterov"},
      {{"optim.name=sgd", "optim.momentum=0.9", "optim.weight_decay=-1"}, "optim.weight_decay"},
      {{"optim.name=sgd", "optim.beta2=0.999"}, "optim.beta2"},  // AdamW's key under sgd
      {{"optim.momentum=0.9"}, "optim.momentum"},                 // SGD's key under adamw
      {{"optim.nesterov=true"}, "optim.nesterov"},
  };
  for (const auto& [overrides, key] : bad) {
    std::string msg = parse_error("", overrides);
    EXPECT_NE(msg.find(key), std::string::npos) << overrides.back() << " gave: '" << msg << "'";
  }
}

// The recipe of issue 28 (docs/training.md, "ImageNet-style training with SGD") parses and
// validates as written.
TEST(Config, Resnet50ImageFolderRecipeLoads) {
  Config c = cadre::config_load(CADRE_SOURCE_DIR "/configs/resnet50_imagefolder.yaml", {});
  cadre::model_config_resolve(c);
  EXPECT_EQ(c.model.arch, "resnet");
  const cadre::ResnetConfig m = cadre::resnet_config(c.model);
  EXPECT_EQ(m.depth, 50);
  EXPECT_EQ(m.width, 64);
  EXPECT_EQ(m.image_size, 224);
  EXPECT_EQ(m.stem, "imagenet");
  EXPECT_DOUBLE_EQ(m.label_smoothing, 0.1);
  EXPECT_EQ(c.optim.name, "sgd");
  EXPECT_DOUBLE_EQ(c.optim.momentum, 0.9);
  EXPECT_TRUE(c.optim.nesterov);
  EXPECT_DOUBLE_EQ(c.optim.weight_decay, 1e-4);
  EXPECT_EQ(c.optim.no_decay, "norm_and_bias");
  EXPECT_EQ(c.data.dir, "data/imagefolder");
  // torchvision's linear scaling: lr 0.1 per 256 images of global batch, here on 8 ranks.
  EXPECT_DOUBLE_EQ(c.optim.lr, 0.1 * double(c.data.batch_size * 8 * c.optim.grad_accum_steps) / 256.0);
}

TEST(Config, FreezeMustBeARegularExpression) {
  const std::string msg = parse_error("", {"train.freeze=^(tok_embeddings|layers"});
  EXPECT_NE(msg.find("train.freeze"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a regular expression"), std::string::npos) << msg;
  EXPECT_EQ(parse_error("", {"train.freeze=^(tok_embeddings|layers\\.0\\.)"}), "");
}
