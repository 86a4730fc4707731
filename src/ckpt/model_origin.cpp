// Finding and copying the files a model came with.
#include "ckpt/model_origin.h"

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "ckpt/checkpoint_dir.h"
#include "ckpt/hf_folder.h"
#include "ckpt/manifest.h"
#include "core/config.h"
#include "core/error.h"
#include "core/file_util.h"

namespace fs = std::filesystem;

namespace cadre {

const std::vector<std::string>& model_origin_files() {
  static const std::vector<std::string> files = {
      "config.json",          "generation_config.json", "tokenizer.json",       "tokenizer_config.json",
      "special_tokens_map.json", "added_tokens.json",   "chat_template.jinja",  "chat_template.json",
      "tokenizer.model"};
  return files;
}

std::vector<std::string> model_origin_copy(const std::string& from_dir, const std::string& to_dir,
                                           const std::vector<std::string>& skip) {
  std::vector<std::string> copied;
  for (const std::string& name : model_origin_files()) {
    const fs::path from = fs::path(from_dir) / name;
    if (std::find(skip.begin(), skip.end(), name) != skip.end() || !fs::is_regular_file(from)) continue;
    fs::create_directories(to_dir);
    file_write_atomic((fs::path(to_dir) / name).string(), file_read(from.string()));
    copied.push_back(name);
  }
  return copied;
}

ModelOrigin model_origin_find(const std::string& checkpoint_dir, const std::string& init_from) {
  std::string dir = checkpoint_dir, from = init_from;
  for (int hops = 0; hops < 16; ++hops) {  // a chain of runs, each started from the one before
    if (!dir.empty() && fs::is_directory(fs::path(dir) / kOriginDir)) return {(fs::path(dir) / kOriginDir).string(), ""};
    if (from.empty()) return {};
    if (!fs::is_directory(from)) return {"", str("train.init_from '", from, "' is no longer there")};
    if (hf_folder_detect(from)) return {from, ""};
    try {
      dir = checkpoint_locate(from);
      const CheckpointManifest m = manifest_parse(file_read(dir + "/" + kManifestFile), dir, PieceCoverage::Complete);
      from = config_parse(m.config_yaml, dir + "/" + kManifestFile, {}).train.init_from;
    } catch (const std::exception& e) {
      return {"", str("train.init_from '", from, "' cannot be followed: ", e.what())};
    }
  }
  return {"", "train.init_from leads through more than 16 checkpoints"};
}

std::string model_origin_dtype(const std::string& origin_dir) {
  const fs::path path = fs::path(origin_dir) / "config.json";
  if (origin_dir.empty() || !fs::is_regular_file(path)) return "";
  const nlohmann::json j = nlohmann::json::parse(file_read(path.string()), nullptr, /*allow_exceptions=*/false);
  for (const char* key : {"dtype", "torch_dtype"})
    if (j.is_object() && j.contains(key) && j[key].is_string()) return j[key].get<std::string>();
  return "";
}

std::string model_tokenizer_file(const std::string& checkpoint_dir, const ModelOrigin& origin, const std::string& data_dir) {
  for (const std::string& dir : {checkpoint_dir, origin.dir, data_dir})
    for (const char* name : {"tokenizer.model", "tokenizer.json"}) {
      const fs::path path = fs::path(dir) / name;
      if (!dir.empty() && fs::is_regular_file(path)) return path.string();
    }
  return "";
}

bool model_origin_has_tokenizer(const std::string& origin_dir) {
  return !origin_dir.empty() && (fs::is_regular_file(fs::path(origin_dir) / "tokenizer.json") ||
                                 fs::is_regular_file(fs::path(origin_dir) / "tokenizer.model"));
}

}  // namespace cadre
