// Import of a Hugging Face model folder into a Cadre checkpoint (`cadre ckpt import --from hf`),
// and the same tensor plan for loading a folder straight into a model. The model supplies
// what the folder must hold (HfImportTarget: its config from config.json, its state-dict
// adapter, its parameters' names and shapes), so this code knows no model.
//
// The checkpoint is <out>/step-00000000/ with model.<name> float32 tensors and the config;
// any world size and strategy loads it (train.init_from). Each tensor is read once and
// written as soon as it is converted: one process never holds more than one tensor, and
// under `cadre run` each rank converts and writes its share of the tensors (balanced by
// bytes), the lead merges the indexes and publishes the directory.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_saver.h"
#include "ckpt/hf_folder.h"
#include "ckpt/state_dict_adapter.h"
#include "core/config.h"

namespace cadre {

struct HfImportTarget {
  Config config;  // the model section (arch and every key) read from config.json
  std::unique_ptr<StateDictAdapter> adapter;
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;  // Cadre names, shapes
};
// Builds the target from config.json's text (`source` names the file in errors); ConfigError
// when the folder describes a model Cadre cannot run.
using HfImportTargetFor = std::function<HfImportTarget(const std::string& config_json, const std::string& source)>;

// One Cadre parameter and the folder's tensor that holds it.
struct HfPlannedTensor {
  std::string name;  // Cadre's
  std::vector<int64_t> shape;
  const HfTensor* source = nullptr;
};

// Matches every parameter of the target to a tensor of the folder: ConfigError naming the
// tensor (and file) when one is missing, has another shape or a dtype Cadre does not read.
// Tensors the model has no use for are listed in `ignored` (e.g. rotary_emb.inv_freq).
std::vector<HfPlannedTensor> hf_plan(const HfFolder& folder, const HfImportTarget& target,
                                     std::vector<std::string>* ignored = nullptr);

struct HfImportOptions {
  std::string from;  // the Hugging Face folder
  std::string out;   // the checkpoint directory to create (holds step-00000000/)
  int64_t rank = 0, world_size = 1;
  AgreeFn agree;     // collective over the ranks (null with one process)
};

// Returns a summary line. ConfigError (exit 2) for a bad folder or an --out that already
// holds checkpoints, before anything is written.
std::string hf_import(const HfImportOptions& options, const HfImportTargetFor& target_for);

}  // namespace cadre
