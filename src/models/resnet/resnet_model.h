// ResNet as the trainer sees it (models/model.h): cross-entropy on image batches with the
// count of correct predictions, FLOPs per image, the dataset's shape checked against the model.
#pragma once

#include <memory>
#include <vector>

#include "models/model.h"
#include "models/resnet/model.h"
#include "shard/module_hooks.h"

namespace cadre {

class ResnetModel : public Model {
 public:
  explicit ResnetModel(const ResnetConfig& config);
  torch::nn::Module& module() override { return *net_; }
  ResNetImpl& net() { return *net_; }
  void init_weights(uint64_t seed) override { net_->init_weights(seed); }
  FSDPModule parallelize(const FullyShardOptions& options, const ParallelConfig& parallel) override;
  LossOutput loss(const Batch& batch) override;
  void check_data(const DatasetManifest& data) const override;
  std::string describe() const override;
  int64_t param_count() const override;
  double flops_per_sample(int64_t) const override { return resnet_flops_per_image(config_); }
  const char* throughput_unit() const override { return "images"; }

 private:
  ResnetConfig config_;
  std::shared_ptr<ResNetImpl> net_;
  std::vector<HookHandle> checkpointing_;
};

}  // namespace cadre
