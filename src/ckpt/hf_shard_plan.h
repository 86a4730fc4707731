// How a Hugging Face export splits its tensors into safetensors files, the way transformers'
// save_pretrained does (huggingface_hub's split_state_dict_into_shards): tensors in order fill
// a file until the next would pass the maximum size; a tensor larger than the maximum gets a
// file of its own. One file is model.safetensors; several are model-0000k-of-0000n.safetensors
// listed by model.safetensors.index.json.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace cadre {

struct HfShardFile {
  std::string name;             // "model.safetensors" or "model-00001-of-00003.safetensors"
  std::vector<size_t> tensors;  // positions in the list planned, in file order
  uint64_t bytes = 0;           // tensor data (the header not counted)
};

// `bytes[i]`: tensor i's size. `max_file_bytes` > 0.
std::vector<HfShardFile> hf_shard_plan(const std::vector<uint64_t>& bytes, uint64_t max_file_bytes);

// model.safetensors.index.json for files holding tensors named `names` (indexed as in the
// plan): {"metadata": {"total_parameters", "total_size"}, "weight_map": {name: file}}, keys
// sorted, as transformers writes it.
std::string hf_index_json(const std::vector<HfShardFile>& files, const std::vector<std::string>& names,
                          int64_t total_parameters);

// Whether `file` is a weights file an export writes (model.safetensors, its index, or a
// model-0000k-of-0000n.safetensors): what a new export into the same folder replaces.
bool hf_is_weights_file(const std::string& file);

}  // namespace cadre
