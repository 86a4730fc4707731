// A Hugging Face model folder as the source of a deferred model's parameters (train.init_from
// naming a folder): each rank reads exactly the bytes of its own shard of each tensor, with
// positional reads, widening bf16 / fp16 / fp32 to the float32 master as it reads. No conversion
// pass, no whole tensor in memory. The folder is checked against the model when it opens
// (hf_plan: every parameter present with its shape and a readable dtype).
#pragma once

#include <map>
#include <memory>
#include <string>

#include "ckpt/hf_folder.h"
#include "ckpt/hf_import.h"
#include "core/param_source.h"

namespace cadre {

class HfParamSource : public ParamSource {
 public:
  // ConfigError naming the folder, file or tensor when it does not hold the model `target` says.
  HfParamSource(const std::string& dir, HfImportTarget target);
  void read(const std::string& name, int64_t start, int64_t count, float* out) const override;
  std::string describe() const override;

  uint64_t bytes_read() const { return folder_.bytes_read(); }
  uint64_t bytes_total() const { return bytes_total_; }  // of every tensor the model reads
  const Config& config() const { return target_.config; }
  const HfFolder& folder() const { return folder_; }

 private:
  HfFolder folder_;
  HfImportTarget target_;
  std::map<std::string, const HfTensor*> tensor_of_;  // Cadre name -> the folder's tensor
  uint64_t bytes_total_ = 0;
};

}  // namespace cadre
