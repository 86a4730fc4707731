// Hugging Face, .pt and DCP export, through the model's name adapter.
#include "ckpt/export.h"

#include <ATen/ATen.h>

#include <filesystem>
#include <map>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/dcp_export.h"
#include "ckpt/tensor_file.h"
#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {

std::string checkpoint_export(const ExportOptions& o, const AdapterFor& adapter_for) {
  CADRE_CONFIG_CHECK(o.format == "hf" || o.format == "pt" || o.format == "dcp", "--format must be hf, pt or dcp, got '",
                     o.format, "'");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required");
  const std::string checkpoint = checkpoint_locate(o.checkpoint);
  CheckpointReader reader(checkpoint);
  // The checkpoint carries the config it was trained with: the export needs nothing else.
  Config config = config_parse(reader.manifest().config_yaml, checkpoint + "/" + kManifestFile, {});
  std::unique_ptr<StateDictAdapter> adapter = adapter_for(config);
  CADRE_CONFIG_CHECK(adapter || o.format != "hf", "model.arch '", config.model.arch,
                     "' has no Hugging Face format; export it with --format pt or dcp (its own tensor names)");
  CADRE_CONFIG_CHECK(o.tokenizer.empty() || fs::is_regular_file(o.tokenizer), "--tokenizer '", o.tokenizer,
                     "': no such file");
  CADRE_CONFIG_CHECK(o.format == "hf" || (o.dtype.empty() && o.max_shard_size == "50GB"),
                     "--dtype and --max-shard-size apply to --format hf; pt and dcp keep the checkpoint's float32");
  CADRE_CONFIG_CHECK(o.format == "hf" || o.world_size == 1, "--format ", o.format,
                     " is written by one process; only --format hf splits its files over the ranks of `cadre run`");

  // Parameters, then buffers (BatchNorm statistics) under their own names.
  std::map<std::string, std::string> names;  // checkpoint tensor -> exported name
  for (const auto& [name, t] : reader.manifest().tensors) {
    std::string own;
    if (name.rfind("model.", 0) == 0) own = name.substr(6);
    else if (name.rfind("buffer.", 0) == 0) own = name.substr(7);
    else continue;
    std::string external = adapter ? adapter->external_name(own) : own;
    if (!external.empty()) names[name] = external;
  }
  CADRE_CHECK(!names.empty(), "checkpoint '", checkpoint, "' holds no model.* tensors");
  const char* naming = adapter ? " with Hugging Face names" : "";
  if (o.format == "dcp") {
    // The stored boxes go out as DCP chunks: nothing is assembled.
    const int64_t chunks = dcp_export(reader, names, o.out);
    return str("wrote ", names.size(), " tensors (", chunks, " chunks)", naming, " from ", checkpoint,
               " to ", o.out, " (.metadata, __0_0.distcp)");
  }
  if (o.format == "hf") {
    HfExportOptions h;
    h.out = o.out;
    h.dtype = o.dtype;
    if (!h.dtype.empty()) hf_export_dtype(h.dtype);  // checked before anything is written
    h.max_file_bytes = hf_parse_size(o.max_shard_size);
    h.tokenizer = o.tokenizer;
    h.rank = o.rank;
    h.world_size = o.world_size;
    h.agree = o.agree;
    h.tokenizer_ids = o.tokenizer_ids;
    return hf_export(reader, config, *adapter, names, h);
  }
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, external] : names) tensors[external] = reader.read_tensor(name);
  tensor_file_save(o.out, tensors);
  return str("wrote ", tensors.size(), " tensors", naming, " from ", checkpoint, " to ", o.out);
}

}  // namespace cadre
