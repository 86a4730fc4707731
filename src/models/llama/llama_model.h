// Llama as the trainer sees it (models/model.h): next-token loss on token batches, FLOPs per
// token, the dataset's vocabulary and sequence length checked against the model; and as text
// generation sees it (CausalLm): its KV-cache decoder (models/llama/decode.h).
#pragma once

#include <memory>
#include <vector>

#include "models/llama/model.h"
#include "models/model.h"
#include "shard/module_hooks.h"

namespace cadre {

class LlamaModel : public Model, public CausalLm {
 public:
  explicit LlamaModel(const LlamaConfig& config, bool deferred = false);
  torch::nn::Module& module() override { return *llama_; }
  Llama& llama() { return *llama_; }
  void init_weights(uint64_t seed) override { llama_->init_weights(seed); }
  std::shared_ptr<const ParamSource> init_source(uint64_t seed) const override { return llama_->init_source(seed); }
  void check_parallel(const ParallelConfig& parallel) const override;
  FSDPModule parallelize(const DeviceMesh& mesh, FullyShardOptions options, const ParallelConfig& parallel) override;
  LossOutput loss(const Batch& batch) override;
  void check_data(const DatasetManifest& data) const override;
  std::string describe() const override;
  int64_t param_count() const override;
  double flops_per_sample(int64_t seq_len) const override;
  int64_t activation_bytes(const ActivationShape& shape) const override;
  const char* throughput_unit() const override { return "tokens"; }
  const CausalLm* causal_lm() const override { return this; }
  LoraNames lora_names() const override;
  std::optional<PipelineTrunk> pipeline_trunk() const override;
  void keep_pipeline_stage(const PipelineStage& stage) override;
  at::Tensor stage_forward(const Batch& batch, const at::Tensor& input, int64_t chunk) override;
  LossOutput stage_loss(const at::Tensor& output, const Batch& batch) override;
  std::vector<int64_t> stage_activation_sizes(int64_t batch, int64_t sample_len) const override {
    return {batch, sample_len, config_.dim};
  }

  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t max_seq_len() const override { return config_.max_seq_len; }
  using CausalLm::decoder;
  std::unique_ptr<Decoder> decoder(const DecodeOptions& options, const ParamSource* weights) const override;

 private:
  LlamaConfig config_;
  std::shared_ptr<Llama> llama_;
  std::vector<HookHandle> checkpointing_;
  std::vector<PipelineStage::Blocks> chunks_;  // a pipeline stage's chunks (keep_pipeline_stage)
};

}  // namespace cadre
