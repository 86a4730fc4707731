// The Model interface over the ResNet module.
#include "models/resnet/resnet_model.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "models/classification_loss.h"
#include "models/resnet/parallelize.h"

namespace cadre {

ResnetModel::ResnetModel(const ResnetConfig& config) : config_(config), net_(std::make_shared<ResNetImpl>(config)) {}

FSDPModule ResnetModel::parallelize(const DeviceMesh&, FullyShardOptions options, const ParallelConfig& parallel) {
  return resnet_parallelize(*net_, options, parallel, checkpointing_);
}

LossOutput ResnetModel::loss(const Batch& batch) {
  at::Tensor logits = call(net_, batch.input);
  LossOutput out;
  out.loss = classification_loss(logits, batch.target, config_.label_smoothing);
  out.correct = logits.argmax(1).eq(batch.target).sum();
  return out;
}

void ResnetModel::check_data(const DatasetManifest& m) const {
  CADRE_CONFIG_CHECK(m.kind == "images" || m.kind == "encoded_images", "data.dir holds ", m.kind,
                     "; model.arch resnet trains on images");
  CADRE_CONFIG_CHECK(m.channels == config_.in_channels, "the dataset's images have ", m.channels,
                     " channel(s) but model.in_channels is ", config_.in_channels);
  CADRE_CONFIG_CHECK(m.height == config_.image_size && m.width == config_.image_size, "the dataset's images are ",
                     m.height, "x", m.width, " but model.image_size is ", config_.image_size);
  CADRE_CONFIG_CHECK(m.num_classes <= config_.num_classes, "the dataset has ", m.num_classes,
                     " classes but model.num_classes is ", config_.num_classes);
}

std::string ResnetModel::describe() const {
  return str("resnet-", config_.depth, " ", param_count() / 1e6, "M parameters, width ", config_.width, ", ",
             config_.stem, " stem, ", config_.image_size, "x", config_.image_size, " inputs");
}

int64_t ResnetModel::param_count() const {
  int64_t n = 0;
  for (const auto& p : net_->parameters()) n += p.numel();
  return n;
}

}  // namespace cadre
