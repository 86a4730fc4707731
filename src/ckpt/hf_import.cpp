// Hugging Face folder -> Cadre checkpoint, one tensor at a time, split over the ranks.
#include "ckpt/hf_import.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/model_origin.h"
#include "ckpt/rank_writer.h"
#include "core/error.h"
#include "core/file_util.h"
#include "core/shape_text.h"

namespace fs = std::filesystem;

namespace cadre {
namespace {

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

// Tensors of each rank: largest first to the rank with the fewest bytes so far (the same
// answer on every rank).
std::vector<std::vector<const HfPlannedTensor*>> assign(const std::vector<HfPlannedTensor>& plan, int64_t world) {
  std::vector<const HfPlannedTensor*> order;
  for (const auto& t : plan) order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](const HfPlannedTensor* a, const HfPlannedTensor* b) {
    return numel_of(a->shape) > numel_of(b->shape);
  });
  std::vector<std::vector<const HfPlannedTensor*>> out(static_cast<size_t>(world));
  std::vector<int64_t> load(static_cast<size_t>(world), 0);
  for (const HfPlannedTensor* t : order) {
    size_t r = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    out[r].push_back(t);
    load[r] += numel_of(t->shape);
  }
  for (auto& list : out)
    std::sort(list.begin(), list.end(), [](const HfPlannedTensor* a, const HfPlannedTensor* b) { return a->name < b->name; });
  return out;
}

}  // namespace

std::vector<HfPlannedTensor> hf_plan(const HfFolder& folder, const HfImportTarget& target,
                                     std::vector<std::string>* ignored) {
  std::vector<HfPlannedTensor> plan;
  std::set<std::string> used, wanted;
  for (const auto& [name, shape] : target.parameters) wanted.insert(name);
  for (const auto& [name, shape] : target.parameters) {
    const std::string external = target.adapter->external_name(name);
    CADRE_CHECK(!external.empty(), "parameter '", name, "' has no name in the Hugging Face format");
    auto it = folder.tensors().find(external);
    if (it == folder.tensors().end()) {
      std::string files;
      for (const auto& f : folder.files()) files += (files.empty() ? "" : ", ") + f;
      throw ConfigError(str("Hugging Face folder '", folder.dir(), "' has no tensor '", external, "' (Cadre's '", name,
                            "'); its files: ", files));
    }
    const HfTensor& t = it->second;
    CADRE_CONFIG_CHECK(t.shape == shape, "tensor '", external, "' in '", folder.dir(), "/", t.file, "' is ",
                       shape_text(t.shape), ", the model config.json describes needs ", shape_text(shape));
    CADRE_CONFIG_CHECK(hf_float_dtype_size(t.dtype) > 0, "tensor '", external, "' in '", folder.dir(), "/", t.file,
                       "' has dtype ", t.dtype, "; Cadre reads F32, BF16 and F16");
    plan.push_back({name, shape, &t});
    used.insert(external);
  }
  for (const auto& [external, t] : folder.tensors()) {
    if (used.count(external)) continue;
    const std::string internal = target.adapter->internal_name(external);
    CADRE_CONFIG_CHECK(internal.empty() || wanted.count(internal), "tensor '", external, "' in '", folder.dir(), "/",
                       t.file, "' would be Cadre's '", internal,
                       "', which the model config.json describes does not have (check num_hidden_layers)");
    if (ignored) ignored->push_back(external);
  }
  return plan;
}

std::string hf_import(const HfImportOptions& o, const HfImportTargetFor& target_for) {
  CADRE_CONFIG_CHECK(!o.from.empty(), "--from hf needs the Hugging Face folder");
  CADRE_CONFIG_CHECK(!o.out.empty(), "--out is required (the checkpoint directory to create)");
  HfFolder folder(o.from);
  HfImportTarget target = target_for(folder.config_json(), folder.dir() + "/config.json");
  std::vector<std::string> ignored;
  const std::vector<HfPlannedTensor> plan = hf_plan(folder, target, &ignored);
  CADRE_CONFIG_CHECK(!fs::exists(o.out) || fs::is_directory(o.out), "--out '", o.out, "' exists and is not a directory");
  const auto existing = checkpoint_list_complete(o.out);
  CADRE_CONFIG_CHECK(existing.empty(), "--out '", o.out, "' already holds a checkpoint (",
                     existing.empty() ? "" : fs::path(existing.front().path).filename().string(),
                     "); import into a new directory");

  auto agree = [&](bool ok) { return o.agree ? o.agree(ok) : ok; };
  const std::string partial = o.out + "/" + checkpoint_partial_name(0);
  std::string error;
  std::vector<std::string> origin;
  if (o.rank == 0) {
    try {
      checkpoint_remove_incomplete(o.out);
      fs::create_directories(partial);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  CADRE_CHECK(agree(error.empty()), "import: ",
              error.empty() ? "the lead rank could not create '" + partial + "' (its log says why)" : error);

  CheckpointManifest header;
  header.step = 0;
  header.world_size = o.world_size;
  header.strategy = "import";
  header.config_yaml = config_to_yaml(target.config);
  int64_t bytes = 0;
  try {
    const auto mine = assign(plan, o.world_size).at(static_cast<size_t>(o.rank));
    RankFileWriter writer(partial, o.rank, header);
    std::vector<float> buffer;
    for (const HfPlannedTensor* t : mine) {
      const int64_t n = numel_of(t->shape);
      buffer.resize(static_cast<size_t>(n));
      folder.read_float32(*t->source, buffer.data());
      writer.append("model." + t->name, "float32", t->shape, box_whole(t->shape),
                    reinterpret_cast<const char*>(buffer.data()));
      bytes += n * 4;
    }
    writer.finish();
  } catch (const std::exception& e) {
    error = str("rank ", o.rank, ": ", e.what());
  }
  if (!agree(error.empty())) {
    std::error_code ec;
    if (o.rank == 0) remove_tree(partial, ec);
    throw Error(str("import into '", o.out, "' failed: ", error.empty() ? "another rank failed (its log says why)" : error));
  }
  if (o.rank == 0) {
    try {
      // The tokenizer and config travel with the weights, so generate and export find them.
      origin = model_origin_copy(o.from, (fs::path(partial) / kOriginDir).string());
      checkpoint_commit(o.out, 0, o.world_size, 1);
    } catch (const std::exception& e) {
      error = e.what();
      std::error_code ec;
      remove_tree(partial, ec);
    }
  }
  CADRE_CHECK(agree(error.empty()), "import into '", o.out, "' was not committed: ",
              error.empty() ? "the lead rank failed to publish it (its log says why)" : error);

  std::set<std::string> dtypes;
  int64_t params = 0;
  for (const auto& t : plan) {
    dtypes.insert(t.source->dtype);
    params += numel_of(t.shape);
  }
  std::string dtype_list;
  for (const auto& d : dtypes) dtype_list += (dtype_list.empty() ? "" : "/") + d;
  std::string summary = str("imported ", plan.size(), " tensors (", params, " parameters, ", dtype_list, " -> float32) from ",
                            folder.files().size(), " safetensors file(s) of ", o.from, " into ", o.out, "/",
                            checkpoint_name(0));
  if (o.world_size > 1) summary += str("; rank ", o.rank, " wrote ", bytes, " bytes");
  if (!origin.empty()) {
    summary += str("; kept in ", kOriginDir, "/:");
    for (const auto& name : origin) summary += " " + name;
  }
  if (!ignored.empty()) {
    summary += "; ignored " + std::to_string(ignored.size()) + " tensor(s) the model does not use:";
    for (const auto& name : ignored) summary += " " + name;
  }
  return summary;
}

}  // namespace cadre
