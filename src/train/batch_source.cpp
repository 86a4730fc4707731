// Token and image batch sources.
#include "train/batch_source.h"

#include <ATen/ATen.h>

#include "data/image_loader.h"
#include "data/loader.h"

namespace cadre {
namespace {

// Host memory the loaders fill: pinned (page-locked, from libtorch's caching host allocator)
// when the batch goes to a GPU, so that the copy below can be asynchronous.
at::TensorOptions host_options(at::ScalarType dtype, const c10::Device& device) {
  return at::TensorOptions().dtype(dtype).pinned_memory(device.is_cuda());
}

// Host to device without waiting (pinned source); on the CPU the tensor itself.
at::Tensor to_device(const at::Tensor& host, const c10::Device& device) {
  if (device.is_cpu()) return host;
  return host.to(device, /*non_blocking=*/true);
}

class TokenBatches : public BatchSource {
 public:
  TokenBatches(const std::string& dir, Split split, uint64_t seed, c10::Device device)
      : loader_(dir, split, seed), device_(device) {}
  const DatasetManifest& manifest() const override { return loader_.manifest(); }
  uint64_t num_samples() const override { return loader_.num_samples(); }
  int64_t sample_len() const override { return loader_.seq_len(); }
  uint64_t position() const override { return loader_.position(); }
  void set_position(uint64_t p) override { loader_.set_position(p); }

  Batch next(uint64_t global, uint64_t first, uint64_t count) override {
    at::Tensor tokens = at::empty({static_cast<int64_t>(count), loader_.seq_len() + 1}, host_options(at::kLong, device_));
    loader_.next(global, first, count, tokens.data_ptr<int64_t>());
    return split(to_device(tokens, device_));
  }

  Batch at(const std::vector<uint64_t>& indices) const override {
    const int64_t per = loader_.seq_len() + 1;
    at::Tensor tokens = at::empty({static_cast<int64_t>(indices.size()), per}, host_options(at::kLong, device_));
    for (size_t i = 0; i < indices.size(); ++i) loader_.sample(indices[i], tokens.data_ptr<int64_t>() + i * per);
    return split(to_device(tokens, device_));
  }

 private:
  Batch split(const at::Tensor& tokens) const {
    const int64_t T = loader_.seq_len();
    return {tokens.narrow(1, 0, T), tokens.narrow(1, 1, T)};
  }
  TokenLoader loader_;
  c10::Device device_;
};

class ImageBatches : public BatchSource {
 public:
  ImageBatches(const std::string& dir, Split split, uint64_t seed, c10::Device device)
      : loader_(dir, split, seed), device_(device) {}
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
    return {at::empty({n, s.channels, s.height, s.width}, host_options(at::kByte, device_)),
            at::empty({n}, host_options(at::kByte, device_))};
  }
  Batch to_batch(const at::Tensor& pixels, const at::Tensor& labels) const {
    const DatasetManifest& m = loader_.manifest();
    at::Tensor x = (to_device(pixels, device_).to(at::kFloat) / 255.0 - m.pixel_mean) / m.pixel_std;
    return {x, to_device(labels, device_).to(at::kLong)};
  }
  ImageLoader loader_;
  c10::Device device_;
};

}  // namespace

std::unique_ptr<BatchSource> BatchSource::open(const std::string& dir, Split split, uint64_t seed,
                                               c10::Device device) {
  if (manifest_read(dir).kind == "images") return std::make_unique<ImageBatches>(dir, split, seed, device);
  return std::make_unique<TokenBatches>(dir, split, seed, device);
}

}  // namespace cadre
