// Opening a language model for inference from a checkpoint or a Hugging Face folder.
#include "generate/model_source.h"

#include <c10/core/GradMode.h>

#include <ATen/ATen.h>

#include <filesystem>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_error.h"
#include "ckpt/checkpoint_param_source.h"
#include "ckpt/hf_folder.h"
#include "ckpt/hf_import.h"
#include "ckpt/hf_param_source.h"
#include "ckpt/manifest.h"
#include "ckpt/model_origin.h"
#include "core/error.h"
#include "core/file_util.h"
#include "data/tokenizer.h"
#include "models/registry.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

void open_hf(const std::string& path, InferenceModel& out) {
  const std::string config_json = file_read(path + "/config.json");
  HfImportTarget target = model_hf_import_target(config_json, path + "/config.json");
  out.config = target.config;
  out.model = model_build_causal_lm(target.config, "Hugging Face folder '" + path + "'", /*deferred=*/true);
  auto source = std::make_shared<HfParamSource>(path, std::move(target));
  bool all_bf16 = true;
  for (const auto& [name, t] : source->folder().tensors()) all_bf16 = all_bf16 && t.dtype == "BF16";
  out.stored_dtype = all_bf16 ? "bfloat16" : "float32";
  out.weights = std::move(source);
  out.tokenizer = tokenizer_file_in(path);
}

void open_checkpoint(const std::string& path, InferenceModel& out) {
  const std::string dir = checkpoint_locate(path);
  try {
    const CheckpointManifest manifest = manifest_parse(file_read(dir + "/" + kManifestFile), dir);
    Config config = config_parse(manifest.config_yaml, dir + "/" + kManifestFile, {});
    // A LoRA run's checkpoint holds a base and adapters; the decoder reads a plain model.
    CADRE_CONFIG_CHECK(config.lora.rank == 0, "--model '", path, "': checkpoint '", dir, "' is a LoRA run's (lora.rank ",
                       config.lora.rank, "); serve the model with its adapters merged (`cadre ckpt export ", dir,
                       " --format hf --merge --out <dir>`, then --model <dir>), or serve its base with the "
                       "adapters' `--format peft` export beside it (cadre serve --lora name=<dir>)");
    out.config = config;
    out.model = model_build_causal_lm(config, "checkpoint '" + dir + "'", /*deferred=*/true);
    std::vector<std::pair<std::string, std::vector<int64_t>>> parameters;
    for (const auto& p : out.model->module().named_parameters()) parameters.push_back({p.key(), p.value().sizes().vec()});
    out.weights = std::make_shared<CheckpointParamSource>(dir, parameters);
    const ModelOrigin origin = model_origin_find(dir, config.train.init_from);
    out.stored_dtype = model_origin_dtype(origin.dir) == "bfloat16" ? "bfloat16" : "float32";
    out.tokenizer = model_tokenizer_file(dir, origin, config.data.dir);
  } catch (const CheckpointError& e) {
    throw ConfigError(e.what());  // a damaged checkpoint is bad input here: nothing was started
  }
}

}  // namespace

InferenceModel inference_model_open(const std::string& path, const std::string& tokenizer, bool need_tokenizer) {
  CADRE_CONFIG_CHECK(fs::is_directory(path), "--model '", path,
                     "' is not a directory (a checkpoint, a run directory or a Hugging Face folder)");
  InferenceModel out;
  const bool hf = hf_folder_detect(path);
  if (hf) open_hf(path, out);
  else open_checkpoint(path, out);
  out.model->module().eval();
  out.source = std::string(hf ? "Hugging Face folder " : "checkpoint ") + path;
  if (!tokenizer.empty()) {
    CADRE_CONFIG_CHECK(fs::exists(tokenizer), "--tokenizer '", tokenizer, "': no such file or folder");
    out.tokenizer = tokenizer;
  }
  CADRE_CONFIG_CHECK(!need_tokenizer || !out.tokenizer.empty(), "no tokenizer.model or tokenizer.json found for '", path,
                     "' (looked in the folder, the checkpoint and its data.dir); pass --tokenizer");
  fs::path p = fs::path(path).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();
  out.name = p.filename().string();
  return out;
}

InferenceModel inference_model_load(const std::string& path, const std::string& tokenizer, bool need_tokenizer) {
  InferenceModel out = inference_model_open(path, tokenizer, need_tokenizer);
  c10::NoGradGuard no_grad;
  try {
    for (auto& p : out.model->module().named_parameters()) {
      p.value().set_data(at::empty(p.value().sizes(), at::kFloat));
      out.weights->read(p.key(), 0, p.value().numel(), p.value().data_ptr<float>());
    }
  } catch (const CheckpointError& e) {
    throw ConfigError(e.what());
  }
  return out;
}

}  // namespace cadre
