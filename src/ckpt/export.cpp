// Hugging Face and .pt export, through the model's name adapter.
#include "ckpt/export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/safetensors.h"
#include "ckpt/tensor_file.h"
#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {

std::string checkpoint_export(const ExportOptions& o, const AdapterFor& adapter_for) {
  CADRE_CONFIG_CHECK(o.format == "hf" || o.format == "pt", "--format must be hf or pt, got '", o.format, "'");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required");
  const std::string checkpoint = checkpoint_locate(o.checkpoint);
  CheckpointReader reader(checkpoint);
  // The checkpoint carries the config it was trained with: the export needs nothing else.
  Config config = config_parse(reader.manifest().config_yaml, checkpoint + "/" + kManifestFile, {});
  std::unique_ptr<StateDictAdapter> adapter = adapter_for(config);
  CADRE_CONFIG_CHECK(adapter || o.format == "pt", "model.arch '", config.model.arch,
                     "' has no Hugging Face format; export it with --format pt (its own tensor names)");
  std::string tokenizer = o.tokenizer;
  if (tokenizer.empty() && fs::is_regular_file(config.data.dir + "/tokenizer.model")) tokenizer = config.data.dir + "/tokenizer.model";
  CADRE_CONFIG_CHECK(tokenizer.empty() || fs::is_regular_file(tokenizer), "--tokenizer '", tokenizer, "': no such file");

  // Parameters, then buffers (BatchNorm statistics) under their own names.
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, t] : reader.manifest().tensors) {
    std::string own;
    if (name.rfind("model.", 0) == 0) own = name.substr(6);
    else if (name.rfind("buffer.", 0) == 0) own = name.substr(7);
    else continue;
    std::string external = adapter ? adapter->external_name(own) : own;
    if (!external.empty()) tensors[external] = reader.read_tensor(name);
  }
  CADRE_CHECK(!tensors.empty(), "checkpoint '", checkpoint, "' holds no model.* tensors");

  if (o.format == "pt") {
    tensor_file_save(o.out, tensors);
    return str("wrote ", tensors.size(), " tensors", adapter ? " with Hugging Face names" : "", " from ", checkpoint,
               " to ", o.out);
  }
  fs::create_directories(o.out);
  safetensors_write(o.out + "/model.safetensors", tensors, {{"format", "pt"}});
  file_write_atomic(o.out + "/config.json", adapter->config_json(1, 2));
  adapter->write_extras(o.out, tokenizer);
  return str("wrote a Hugging Face folder from ", checkpoint, " to ", o.out, " (config.json, model.safetensors",
             tokenizer.empty() ? "" : ", tokenizer.model", ")");
}

}  // namespace cadre
