// train.init_from: the model section completed from the checkpoint, then a sharded load.
#include "train/init_from.h"

#include <chrono>
#include <set>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "core/error.h"
#include "core/log.h"
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

void init_from_config(Config& c) {
  if (c.train.init_from.empty()) return;
  const std::string path = locate(c);
  Config source;
  try {
    CheckpointReader reader(path);
    source = config_parse(reader.manifest().config_yaml, path + "/" + kManifestFile, {});
  } catch (const CheckpointError& e) {
    throw ConfigError(str("train.init_from: ", e.what()));
  }
  CADRE_CONFIG_CHECK(source.model.arch == c.model.arch, "train.init_from: checkpoint '", path, "' holds a ",
                     source.model.arch, " model, the config's model.arch is ", c.model.arch);
  std::set<std::string> given;
  for (const auto& k : c.model.keys) given.insert(k.key);
  for (const auto& k : source.model.keys)
    if (!given.count(k.key)) c.model.keys.push_back({k.key, k.value, "train.init_from " + path});
}

std::string init_from_load(const Config& c, FSDPModule& model, int rank, comm::Communicator* group) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string path = locate(c);
  std::string error;
  try {
    CheckpointReader reader(path);
    check_checkpoint_fits(reader, model, /*optimizer=*/nullptr);  // ConfigError: the same on every rank
    load_model_state(reader, model);
    log::info(str("init_from: rank ", rank, " read ", reader.bytes_read(), " of ", reader.bytes_total(), " bytes of ",
                  path));
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
