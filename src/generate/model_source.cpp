// Loading a language model for inference from a checkpoint or a Hugging Face folder.
#include "generate/model_source.h"

#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/hf_folder.h"
#include "ckpt/hf_import.h"
#include "ckpt/model_origin.h"
#include "core/error.h"
#include "core/shape_text.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

std::unique_ptr<Model> from_hf(const std::string& path, std::string& tokenizer) {
  HfFolder folder(path);
  HfImportTarget target = model_hf_import_target(folder.config_json(), path + "/config.json");
  std::unique_ptr<Model> model = model_build_causal_lm(target.config, "Hugging Face folder '" + path + "'");
  auto params = model->module().named_parameters();
  for (const HfPlannedTensor& t : hf_plan(folder, target)) folder.read_float32(*t.source, params[t.name].data_ptr<float>());
  if (fs::is_regular_file(path + "/tokenizer.model")) tokenizer = path + "/tokenizer.model";
  return model;
}

std::unique_ptr<Model> from_checkpoint(const std::string& path, std::string& tokenizer) {
  const std::string dir = checkpoint_locate(path);
  try {
    CheckpointReader reader(dir);
    Config config = config_parse(reader.manifest().config_yaml, dir + "/" + kManifestFile, {});
    std::unique_ptr<Model> model = model_build_causal_lm(config, "checkpoint '" + dir + "'");
    for (auto& p : model->module().named_parameters()) {
      const TensorRecord& t = reader.tensor("model." + p.key());
      CADRE_CONFIG_CHECK(t.dtype == "float32" && t.shape == p.value().sizes().vec(), "checkpoint '", dir, "': tensor 'model.",
                         p.key(), "' is ", t.dtype, " ", shape_text(t.shape), ", its config needs float32 ",
                         shape_text(p.value().sizes().vec()));
      reader.read("model." + p.key(), 0, p.value().numel(), p.value().data_ptr());
    }
    const ModelOrigin origin = model_origin_find(dir, config.train.init_from);
    if (fs::is_regular_file(dir + "/tokenizer.model")) tokenizer = dir + "/tokenizer.model";  // imports before origin/
    else if (!origin.dir.empty() && fs::is_regular_file(origin.dir + "/tokenizer.model"))
      tokenizer = origin.dir + "/tokenizer.model";
    else if (!config.data.dir.empty() && fs::is_regular_file(config.data.dir + "/tokenizer.model"))
      tokenizer = config.data.dir + "/tokenizer.model";
    return model;
  } catch (const CheckpointError& e) {
    throw ConfigError(e.what());  // a damaged checkpoint is bad input here: nothing was started
  }
}

}  // namespace

InferenceModel inference_model_load(const std::string& path, const std::string& tokenizer, bool need_tokenizer) {
  CADRE_CONFIG_CHECK(fs::is_directory(path), "--model '", path,
                     "' is not a directory (a checkpoint, a run directory or a Hugging Face folder)");
  InferenceModel out;
  const bool hf = hf_folder_detect(path);
  out.model = hf ? from_hf(path, out.tokenizer) : from_checkpoint(path, out.tokenizer);
  out.model->module().eval();
  out.source = std::string(hf ? "Hugging Face folder " : "checkpoint ") + path;
  if (!tokenizer.empty()) {
    CADRE_CONFIG_CHECK(fs::is_regular_file(tokenizer), "--tokenizer '", tokenizer, "': no such file");
    out.tokenizer = tokenizer;
  }
  CADRE_CONFIG_CHECK(!need_tokenizer || !out.tokenizer.empty(), "no tokenizer.model found for '", path,
                     "' (looked in the folder, the checkpoint and its data.dir); pass --tokenizer");
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  out.name = p.filename().string();
  return out;
}

}  // namespace cadre
