// Hugging Face, .pt and DCP export, through the model's name adapter.
#include "ckpt/export.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <filesystem>
#include <map>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/checkpoint_reader.h"
#include "ckpt/dcp_export.h"
#include "ckpt/lora_export.h"
#include "ckpt/tensor_file.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/lora_naming.h"
#include "core/progress.h"
#include "core/value_fingerprint.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

int64_t shape_numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// The fingerprint (core/value_fingerprint.h) of the base as `base` reads it, 16M elements at a time.
uint64_t base_fingerprint(const BaseWeights& base) {
  constexpr int64_t kChunk = int64_t{1} << 24;
  int64_t total = 0, done = 0;
  for (const auto& [name, shape] : base.shapes) total += shape_numel(shape);
  Progress progress("export: reading the base to check it is the adapters' own", total, "elem", 2.0);
  std::vector<float> chunk(static_cast<size_t>(std::min(kChunk, std::max<int64_t>(total, 1))));
  uint64_t sum = 0;
  for (const auto& [name, shape] : base.shapes) {
    const uint64_t key = value_fingerprint_key(name);
    const int64_t numel = shape_numel(shape);
    for (int64_t at = 0; at < numel; at += kChunk) {
      const int64_t n = std::min(kChunk, numel - at);
      base.source->read(name, at, n, chunk.data());
      sum += value_fingerprint(key, at, chunk.data(), n);
      progress.update(done += n);
    }
  }
  progress.finish();
  return sum;
}

// A checkpoint that leaves its base out, merged: the base read from where the run read it, if
// it is the one the adapters were trained on (ConfigError otherwise); its tensors join `names`.
void add_base(const CheckpointReader& reader, const Config& config, const StateDictAdapter& adapter,
              const ExportOptions& o, BaseWeights& base, std::map<std::string, std::string>& names, HfExportOptions& h) {
  CADRE_CHECK(o.base_for, "export --merge: no way to read the base of ", reader.dir());
  base = o.base_for(config);
  const uint64_t there = static_cast<uint64_t>(reader.manifest().state.at(kBaseFingerprintState));
  const uint64_t here = base_fingerprint(base);
  CADRE_CONFIG_CHECK(here == there, "--merge: ", reader.dir(), " holds adapters trained on another base than ",
                     base.description, " (base fingerprint ", value_fingerprint_text(there), " there, ",
                     value_fingerprint_text(here), " read now): was the base changed since the run?");
  for (const auto& [name, shape] : base.shapes) {
    const std::string stored = "model." + name;
    if (reader.has(stored)) continue;
    names[stored] = adapter.external_name(name);
    h.base_tensors[stored] = shape;
  }
  h.base = base.source.get();
}

}  // namespace

std::string checkpoint_export(const ExportOptions& o, const AdapterFor& adapter_for) {
  CADRE_CONFIG_CHECK(o.format == "hf" || o.format == "peft" || o.format == "pt" || o.format == "dcp",
                     "--format must be hf, peft, pt or dcp, got '", o.format, "'");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required");
  const std::string checkpoint = checkpoint_locate(o.checkpoint);
  CheckpointReader reader(checkpoint);
  // The checkpoint carries the config it was trained with: the export needs nothing else.
  Config config = config_parse(reader.manifest().config_yaml, checkpoint + "/" + kManifestFile, {});
  std::unique_ptr<StateDictAdapter> adapter = adapter_for(config);
  CADRE_CONFIG_CHECK(adapter || (o.format != "hf" && o.format != "peft"), "model.arch '", config.model.arch,
                     "' has no Hugging Face format; export it with --format pt or dcp (its own tensor names)");
  const LoraCheckpoint lora = lora_checkpoint(reader, config);
  CADRE_CONFIG_CHECK(!o.merge || o.format == "hf", "--merge applies to --format hf (the adapters merged into the base)");
  CADRE_CONFIG_CHECK(!o.merge || !lora.empty(), "--merge: ", checkpoint,
                     " holds no LoRA adapters (a run without lora.rank): export it with --format hf alone");
  CADRE_CONFIG_CHECK(o.format != "hf" || lora.empty() || o.merge, checkpoint, " holds LoRA adapters (lora.rank ",
                     lora.config.rank, ", ", lora.layers.size(), " layers), which a Hugging Face model folder has no "
                     "place for: export them with --format peft (PEFT's adapter folder, for the base), or the model "
                     "with the adapters merged into the base with --format hf --merge");
  CADRE_CONFIG_CHECK(!manifest_leaves_out_base(reader.manifest()) || o.format == "peft" || o.merge, checkpoint,
                     " holds a LoRA run's adapters without the base they were trained on: export them with --format "
                     "peft, or the model with them merged into the base with --format hf --merge");
  CADRE_CONFIG_CHECK(o.tokenizer.empty() || fs::is_regular_file(o.tokenizer), "--tokenizer '", o.tokenizer,
                     "': no such file");
  CADRE_CONFIG_CHECK(o.format == "hf" || o.format == "peft" || (o.dtype.empty() && o.max_shard_size == "50GB"),
                     "--dtype and --max-shard-size apply to --format hf (--dtype also to peft); pt and dcp keep the "
                     "checkpoint's float32");
  CADRE_CONFIG_CHECK(o.format != "peft" || o.max_shard_size == "50GB", "--max-shard-size applies to --format hf; "
                     "a PEFT adapter is one file");
  CADRE_CONFIG_CHECK(o.format == "hf" || o.world_size == 1, "--format ", o.format,
                     " is written by one process; only --format hf splits its files over the ranks of `cadre run`");

  if (o.format == "peft")
    return peft_export(reader, config, *adapter, lora, o.out, o.dtype.empty() ? at::kFloat : hf_export_dtype(o.dtype));

  // Parameters, then buffers (BatchNorm statistics) under their own names; a merged export
  // leaves the adapters out (they are in their weights).
  std::map<std::string, std::string> names;  // checkpoint tensor -> exported name
  for (const auto& [name, t] : reader.manifest().tensors) {
    std::string own;
    if (o.merge && lora_is_adapter(name)) continue;
    if (name.rfind("model.", 0) == 0) own = name.substr(6);
    else if (name.rfind("buffer.", 0) == 0) own = name.substr(7);
    else continue;
    std::string external = !adapter                ? own
                           : lora_is_adapter(own) ? lora_external_name(*adapter, own)
                                                  : adapter->external_name(own);
    if (!external.empty()) names[name] = external;
  }
  HfExportOptions h;
  BaseWeights base;
  if (o.merge && manifest_leaves_out_base(reader.manifest())) add_base(reader, config, *adapter, o, base, names, h);
  CADRE_CHECK(!names.empty(), "checkpoint '", checkpoint, "' holds no model.* tensors");
  const char* naming = adapter ? " with Hugging Face names" : "";
  if (o.format == "dcp") {
    // The stored boxes go out as DCP chunks: nothing is assembled.
    const int64_t chunks = dcp_export(reader, names, o.out);
    return str("wrote ", names.size(), " tensors (", chunks, " chunks)", naming, " from ", checkpoint,
               " to ", o.out, " (.metadata, __0_0.distcp)");
  }
  if (o.format == "hf") {
    h.out = o.out;
    h.dtype = o.dtype;
    if (!h.dtype.empty()) hf_export_dtype(h.dtype);  // checked before anything is written
    h.max_file_bytes = hf_parse_size(o.max_shard_size);
    h.tokenizer = o.tokenizer;
    h.rank = o.rank;
    h.world_size = o.world_size;
    h.agree = o.agree;
    h.tokenizer_ids = o.tokenizer_ids;
    if (o.merge)
      for (const auto& t : lora.layers) h.merges[t.weight] = {t.a, t.b, lora.scale};
    return hf_export(reader, config, *adapter, names, h);
  }
  std::map<std::string, at::Tensor> tensors;
  for (const auto& [name, external] : names) tensors[external] = reader.read_tensor(name);
  tensor_file_save(o.out, tensors);
  return str("wrote ", tensors.size(), " tensors", naming, " from ", checkpoint, " to ", o.out);
}

}  // namespace cadre
