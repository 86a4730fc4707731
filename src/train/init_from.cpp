// train.init_from: the model section completed from the checkpoint or Hugging Face folder,
// then a sharded load (a folder's is read as the shards are made: HfParamSource).
#include "train/init_from.h"

#include <algorithm>
#include <chrono>
#include <set>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/log.h"
#include "models/registry.h"
#include "train/checkpointing.h"

namespace cadre {
namespace {

std::string locate(const Config& c) {
  try {
    return checkpoint_locate(c.train.init_from);
  } catch (const ConfigError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  }
}

}  // namespace

bool init_from_hf(const Config& c) { return !c.train.init_from.empty() && hf_folder_detect(c.train.init_from); }

void init_from_config(Config& c) {
  if (c.train.init_from.empty()) return;
  const bool hf = init_from_hf(c);
  const std::string path = hf ? c.train.init_from : locate(c);
  Config source;
  try {
    if (hf) {
      const HfFolder folder(path);  // the headers only
      source = model_hf_import_target(folder.config_json(), path + "/config.json").config;
    } else {
      CheckpointReader reader(path);
      source = config_parse(reader.manifest().config_yaml, path + "/" + kManifestFile, {});
    }
  } catch (const CheckpointError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  } catch (const ConfigError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  }
  // Its adapters would be dropped: the base would come back alone.
  CADRE_CONFIG_CHECK(source.lora.rank == 0, "train.init_from: checkpoint '", path, "' is a LoRA run's (lora.rank ",
                     source.lora.rank, "): start from its merged export (`cadre ckpt export ", path,
                     " --format hf --merge --out <dir>`), or from its base with its adapters as lora.init_from "
                     "(their `--format peft` export)");
  CADRE_CONFIG_CHECK(source.model.arch == c.model.arch, "train.init_from: ", hf ? "Hugging Face folder '" : "checkpoint '",
                     path, "' holds a ", source.model.arch, " model, the config's model.arch is ", c.model.arch);
  std::set<std::string> given;
  for (const auto& k : c.model.keys) given.insert(k.key);
  for (const auto& k : source.model.keys)
    if (!given.count(k.key)) c.model.keys.push_back({k.key, k.value, "train.init_from " + path});
}

std::shared_ptr<HfParamSource> init_from_hf_source(const Config& c, Model& model) {
  HfImportTarget target;
  target.config = c;
  target.adapter = model_state_dict_adapter(c);
  CADRE_CONFIG_CHECK(target.adapter, "train.init_from: a Hugging Face folder, but model.arch ", c.model.arch,
                     " has no Hugging Face names");
  // The shapes of the run's own model (before tensor parallelism splits it): a model key the
  // config changes is caught here, naming the tensor.
  for (const auto& p : model.module().named_parameters())
    if (!lora_is_adapter(p.key())) target.parameters.push_back({p.key(), p.value().sizes().vec()});
  try {
    return std::make_shared<HfParamSource>(c.train.init_from, std::move(target));
  } catch (const ConfigError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  }
}

void init_from_hf_report(const HfParamSource& source, double seconds, int rank, int64_t dp_share) {
  log::info(str("init_from: rank ", rank, " read ", source.bytes_read(), " of ", source.bytes_total(), " bytes (",
                100.0 * double(source.bytes_read()) / double(std::max<uint64_t>(1, source.bytes_total())),
                "%; its shard is 1/", dp_share, ") of ", source.describe(), " in ", seconds, " s"));
}

std::shared_ptr<CheckpointParamSource> init_from_checkpoint_source(const Config& c, Model& model) {
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;
  for (const auto& p : model.module().named_parameters())
    if (!lora_is_adapter(p.key())) parameters.emplace_back(p.key(), p.value().sizes().vec());
  const std::string path = locate(c);
  try {
    return std::make_shared<CheckpointParamSource>(path, parameters);
  } catch (const ConfigError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  } catch (const CheckpointError& e) {
    throw ConfigError(str("train.init_from: '", path, "' could not be loaded: ", e.what()));
  }
}

BaseParamSource base_param_source(const Config& c, Model& model) {
  BaseParamSource out;
  if (init_from_hf(c)) out.source = out.hf = init_from_hf_source(c, model);
  else if (!c.train.init_from.empty()) out.source = out.checkpoint = init_from_checkpoint_source(c, model);
  else out.source = model.init_source(static_cast<uint64_t>(c.train.seed));
  CADRE_CONFIG_CHECK(out.source, "model.arch '", c.model.arch, "' cannot give its initial weights as a source");
  return out;
}

std::string init_from_load(const Config& c, FSDPModule& model, int rank, comm::Communicator* group,
                           const CheckpointParamSource* made_from) {
  if (init_from_hf(c)) return c.train.init_from;  // read into the shards as they were made (run_setup.cpp)
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = made_from ? made_from->reader().dir() : locate(c);
  std::string error;
  auto report = [&](const CheckpointReader& reader) {
    log::info(str("init_from: rank ", rank, " read ", reader.bytes_read(), " of ", reader.bytes_total(), " bytes of ",
                  path));
  };
  try {
    if (made_from) {  // the shards were read as they were made: the buffers are left
      load_buffers(made_from->reader(), model);
      report(made_from->reader());
    } else {
      CheckpointReader reader(path);
      check_checkpoint_fits(reader, model, /*optimizer=*/nullptr);  // ConfigError: the same on every rank
      load_model_state(reader, model);
      report(reader);
    }
  } catch (const CheckpointError& e) {
    error = e.what();
  }
  CADRE_CHECK(comm::all_ranks_agree(group, error.empty()), "train.init_from: '", path, "' could not be loaded: ",
              error.empty() ? "another rank failed to read it (its log says why)" : error);
  if (rank == 0)
    log::info(str("train: initialised from ", path, " (", std::chrono::duration<double>(
                                                             std::chrono::steady_clock::now() - t0).count(),
                  " s); step 0, fresh optimizer"));
  return path;
}

}  // namespace cadre
