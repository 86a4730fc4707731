// Token and image batch sources.
#include "train/batch_source.h"

#include <ATen/ATen.h>

#include "data/image_loader.h"
#include "data/loader.h"

namespace cadre {
namespace {

class TokenBatches : public BatchSource {
 public:
  TokenBatches(const std::string& dir, Split split, uint64_t seed) : loader_(dir, split, seed) {}
  const DatasetManifest& manifest() const override { return loader_.manifest(); }
  uint64_t num_samples() const override { return loader_.num_samples(); }
  int64_t sample_len() const override { return loader_.seq_len(); }
  uint64_t position() const override { return loader_.position(); }
  void set_position(uint64_t p) override { loader_.set_position(p); }

  Batch next(uint64_t global, uint64_t first, uint64_t count) override {
    at::Tensor tokens = at::empty({static_cast<int64_t>(count), loader_.seq_len() + 1}, at::kLong);
    loader_.next(global, first, count, tokens.data_ptr<int64_t>());
    return split(tokens);
  }

  Batch at(const std::vector<uint64_t>& indices) const override {
    const int64_t per = loader_.seq_len() + 1;
    at::Tensor tokens = at::empty({static_cast<int64_t>(indices.size()), per}, at::kLong);
    for (size_t i = 0; i < indices.size(); ++i) loader_.sample(indices[i], tokens.data_ptr<int64_t>() + i * per);
    return split(tokens);
  }

 private:
  Batch split(const at::Tensor& tokens) const {
    const int64_t T = loader_.seq_len();
    return {tokens.narrow(1, 0, T), tokens.narrow(1, 1, T)};
  }
  TokenLoader loader_;
};

class ImageBatches : public BatchSource {
 public:
  ImageBatches(const std::string& dir, Split split, uint64_t seed) : loader_(dir, split, seed) {}
  const DatasetManifest& manifest() const override { return loader_.manifest(); }
  uint64_t num_samples() const override { return loader_.num_samples(); }
  int64_t sample_len() const override { return 1; }
  uint64_t position() const override { return loader_.position(); }
  void set_position(uint64_t p) override { loader_.set_position(p); }

  Batch next(uint64_t global, uint64_t first, uint64_t count) override {
    auto [pixels, labels] = buffers(count);
    loader_.next(global, first, count, labels.data_ptr<uint8_t>(), pixels.data_ptr<uint8_t>());
    return to_batch(pixels, labels);
  }

  Batch at(const std::vector<uint64_t>& indices) const override {
    auto [pixels, labels] = buffers(indices.size());
    const int64_t per = static_cast<int64_t>(loader_.shape().pixels());
    for (size_t i = 0; i < indices.size(); ++i)
      labels.data_ptr<uint8_t>()[i] = loader_.sample(indices[i], pixels.data_ptr<uint8_t>() + i * per);
    return to_batch(pixels, labels);
  }

 private:
  std::pair<at::Tensor, at::Tensor> buffers(uint64_t count) const {
    const ImageShape s = loader_.shape();
    const int64_t n = static_cast<int64_t>(count);
    return {at::empty({n, s.channels, s.height, s.width}, at::kByte), at::empty({n}, at::kByte)};
  }
  Batch to_batch(const at::Tensor& pixels, const at::Tensor& labels) const {
    const DatasetManifest& m = loader_.manifest();
    at::Tensor x = (pixels.to(at::kFloat) / 255.0 - m.pixel_mean) / m.pixel_std;
    return {x, labels.to(at::kLong)};
  }
  ImageLoader loader_;
};

}  // namespace

std::unique_ptr<BatchSource> BatchSource::open(const std::string& dir, Split split, uint64_t seed) {
  if (manifest_read(dir).kind == "images") return std::make_unique<ImageBatches>(dir, split, seed);
  return std::make_unique<TokenBatches>(dir, split, seed);
}

}  // namespace cadre
