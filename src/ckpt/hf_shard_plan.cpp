// Splitting an export into safetensors files, and the index that lists them.
#include "ckpt/hf_shard_plan.h"

#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>

#include "core/error.h"

namespace cadre {

std::vector<HfShardFile> hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_file_bytes) {
  CADRE_CHECK(max_file_bytes > 0, "the largest file size must be positive");
  std::vector<HfShardFile> files;
  HfShardFile current;
  for (size_t i = 0; i < bytes.size(); ++i) {
    if (bytes[i] > max_file_bytes) {  // alone, in the order it came (the file being filled goes on)
      files.push_back({"", {i}, bytes[i]});
      continue;
    }
    if (current.bytes + bytes[i] > max_file_bytes) {
      files.push_back(std::move(current));
      current = {};
    }
    current.tensors.push_back(i);
    current.bytes += bytes[i];
  }
  if (!current.tensors.empty() || files.empty()) files.push_back(std::move(current));
  for (size_t k = 0; k < files.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, files.size());
    files[k].name = files.size() == 1 ? "model.safetensors" : name;
  }
  return files;
}

std::string hf_index_json(const std::vector<HfShardFile>& files, const std::vector<std::string>& names,
                          int64_t total_parameters) {
  nlohmann::json map = nlohmann::json::object();
  uint64_t total = 0;
  for (const HfShardFile& f : files) {
    total += f.bytes;
    for (size_t i : f.tensors) map[names.at(i)] = f.name;
  }
  // nlohmann's object keeps keys sorted: the order json.dumps(sort_keys=True) writes.
  nlohmann::json index = {{"metadata", {{"total_parameters", total_parameters}, {"total_size", total}}},
                          {"weight_map", map}};
  return index.dump(2) + "\n";
}

bool hf_is_weights_file(const std::string& file) {
  static const std::regex shard(R"(model-\d{5}-of-\d{5}\.safetensors)");
  return file == "model.safetensors" || file == "model.safetensors.index.json" || std::regex_match(file, shard);
}

}  // namespace cadre
