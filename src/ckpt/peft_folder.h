// A PEFT LoRA adapter folder opened for reading: adapter_config.json (r, lora_alpha,
// lora_dropout, checked to be plain LoRA) and adapter_model.safetensors, whose tensors
// (base_model.model.<module>.lora_A.weight / lora_B.weight) are named as the model names its
// adapter factors ("layers.0.attention.wq.lora_a", core/lora_naming.h) through the model's
// Hugging Face names. Only the headers are read when it opens; values are read in ranges.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "ckpt/hf_folder.h"
#include "ckpt/state_dict_adapter.h"

namespace cadre {

class PeftAdapterFolder {
 public:
  // ConfigError naming `what` (the key or flag that named the folder) and the file when it is
  // not a LoRA adapter Cadre can apply: another peft_type, rsLoRA, DoRA, fan_in_fan_out, trained
  // biases, modules_to_save, a module the model has no name for.
  PeftAdapterFolder(const std::string& dir, const StateDictAdapter& names, const std::string& what);

  const std::string& dir() const { return folder_.dir(); }
  int64_t rank() const { return rank_; }
  double alpha() const { return alpha_; }
  double dropout() const { return dropout_; }
  double scale() const { return alpha_ / double(rank_); }
  // The model's factor name -> the folder's tensor.
  const std::map<std::string, const HfTensor*>& factors() const { return factors_; }
  // The adapted layers, by the model's names, in name order.
  std::vector<std::string> layers() const;
  // Elements [start, start + count) of a factor, as float32.
  void read(const std::string& factor, int64_t start, int64_t count, float* out) const;

 private:
  HfFolder folder_;
  int64_t rank_ = 0;
  double alpha_ = 0, dropout_ = 0;
  std::map<std::string, const HfTensor*> factors_;
};

}  // namespace cadre
