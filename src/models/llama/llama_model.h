// Llama as the trainer sees it (models/model.h): next-token loss on token batches, FLOPs per
// token, the dataset's vocabulary and sequence length checked against the model.
#pragma once

#include <memory>
#include <vector>

#include "models/llama/model.h"
#include "models/model.h"
#include "shard/module_hooks.h"

namespace cadre {

class LlamaModel : public Model {
 public:
  explicit LlamaModel(const LlamaConfig& config);
  torch::nn::Module& module() override { return *llama_; }
  Llama& llama() { return *llama_; }
  void init_weights(uint64_t seed) override { llama_->init_weights(seed); }
  FSDPModule parallelize(const FullyShardOptions& options, const ParallelConfig& parallel) override;
  LossOutput loss(const Batch& batch) override;
  void check_data(const DatasetManifest& data) const override;
  std::string describe() const override;
  int64_t param_count() const override;
  double flops_per_sample(int64_t seq_len) const override;
  const char* throughput_unit() const override { return "tokens"; }

 private:
  LlamaConfig config_;
  std::shared_ptr<Llama> llama_;
  std::vector<HookHandle> checkpointing_;
};

}  // namespace cadre
