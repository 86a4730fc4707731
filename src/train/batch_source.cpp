// Token and image batch sources.
#include "train/batch_source.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "data/encoded_image_loader.h"

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

// The lengths of the documents over a window's first T tokens, from where they start (the
// first at 0; a start at T begins a document that only the last target sees).
std::vector<int64_t> document_lengths(const std::vector<int64_t>& starts, int64_t T) {
  std::vector<int64_t> lengths;
  for (size_t d = 0; d < starts.size() && starts[d] < T; ++d)
    lengths.push_back((d + 1 < starts.size() ? std::min(starts[d + 1], T) : T) - starts[d]);
  return lengths;
}

class TokenBatches : public BatchSource {
 public:
  TokenBatches(const std::string& dir, Split split, uint64_t seed, bool train_on_prompt, c10::Device device)
      : loader_(dir, split, seed, train_on_prompt), device_(device) {}
  const DatasetManifest& manifest() const override { return loader_.manifest(); }
  bool labelled() const override { return loader_.labelled(); }
  uint64_t num_samples() const override { return loader_.num_samples(); }
  int64_t sample_len() const override { return loader_.seq_len(); }
  uint64_t position() const override { return loader_.position(); }
  void set_position(uint64_t p) override { loader_.set_position(p); }

  Batch next(uint64_t global, uint64_t first, uint64_t count) override {
    auto [tokens, labels] = buffers(count);
    std::vector<std::vector<int64_t>> starts(loader_.packed() ? count : 0);
    loader_.next(global, first, count, tokens.data_ptr<int64_t>(), labels.defined() ? labels.data_ptr<int64_t>() : nullptr,
                 starts.data());
    return split(tokens, labels, starts);
  }

  Batch at(const std::vector<uint64_t>& indices) const override {
    const int64_t per = loader_.seq_len() + 1;
    auto [tokens, labels] = buffers(indices.size());
    std::vector<std::vector<int64_t>> starts(loader_.packed() ? indices.size() : 0);
    for (size_t i = 0; i < indices.size(); ++i)
      loader_.sample(indices[i], tokens.data_ptr<int64_t>() + i * per,
                     labels.defined() ? labels.data_ptr<int64_t>() + i * per : nullptr,
                     starts.empty() ? nullptr : &starts[i]);
    return split(tokens, labels, starts);
  }

 private:
  // Host tokens, and labels for a labelled dataset (else undefined).
  std::pair<at::Tensor, at::Tensor> buffers(uint64_t count) const {
    const std::vector<int64_t> shape = {static_cast<int64_t>(count), loader_.seq_len() + 1};
    at::Tensor tokens = at::empty(shape, host_options(at::kLong, device_));
    return {tokens, loader_.labelled() ? at::empty(shape, host_options(at::kLong, device_)) : at::Tensor()};
  }
  // Inputs are the first seq_len tokens; targets the next token at each position, or its label.
  // Packed windows: their documents over the inputs, from where each begins.
  Batch split(const at::Tensor& tokens, const at::Tensor& labels, const std::vector<std::vector<int64_t>>& starts) const {
    const int64_t T = loader_.seq_len();
    const at::Tensor on_device = to_device(tokens, device_);
    const at::Tensor targets = labels.defined() ? to_device(labels, device_) : on_device;
    Batch batch{on_device.narrow(1, 0, T), targets.narrow(1, 1, T)};
    for (const auto& window : starts) batch.documents.push_back(document_lengths(window, T));
    return batch;
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

// "0.485,0.456,0.406": three numbers, named by `key` in errors.
void parse_triple(const std::string& text, const char* key, float out[3]) {
  std::stringstream in(text);
  std::string part;
  int n = 0;
  while (std::getline(in, part, ',')) {
    char* end = nullptr;
    const double v = std::strtod(part.c_str(), &end);
    CADRE_CONFIG_CHECK(n < 3 && end != part.c_str() && *end == '\0', key, ": expected three comma-separated numbers, got '",
                       text, "'");
    out[n++] = static_cast<float>(v);
  }
  CADRE_CONFIG_CHECK(n == 3, key, ": expected three comma-separated numbers, got '", text, "'");
}

// Decode threads: data.workers, or the cores each local rank has beside its training threads.
int decode_workers(const DataConfig& data, int64_t train_threads) {
  if (data.workers > 0) return static_cast<int>(data.workers);
  const char* local = std::getenv("LOCAL_WORLD_SIZE");
  const int64_t ranks = local ? std::max(1L, std::atol(local)) : 1;
  const int64_t cores = std::max<int64_t>(1, std::thread::hardware_concurrency());
  return static_cast<int>(std::max<int64_t>(1, cores / ranks - train_threads));
}

// The loader's host buffers: ATen tensors, so a batch leaves the loader without a copy; pinned
// (host_options) when the batch goes to a GPU, so that its copy there is asynchronous.
HostBufferAlloc host_buffer_tensor(const c10::Device& device) {
  return [device](size_t bytes) {
    auto tensor = std::make_shared<at::Tensor>(at::empty({static_cast<int64_t>(bytes)}, host_options(at::kByte, device)));
    return HostBuffer{tensor->data_ptr<uint8_t>(), tensor};
  };
}

class EncodedImageBatches : public BatchSource {
 public:
  EncodedImageBatches(const std::string& dir, Split split, uint64_t seed, const DataConfig& data, int64_t train_threads,
                      c10::Device device)
      : loader_(dir, split, seed, options(data, split, train_threads, device)), device_(device) {
    // Made once, where the batches are normalised: not two small host->device copies a batch.
    const ImageTransform& t = loader_.options().transform;
    mean_ = at::tensor(at::ArrayRef<float>(t.mean, 3)).view({1, 3, 1, 1}).to(device_);
    std_ = at::tensor(at::ArrayRef<float>(t.std, 3)).view({1, 3, 1, 1}).to(device_);
  }
  const DatasetManifest& manifest() const override { return loader_.manifest(); }
  uint64_t num_samples() const override { return loader_.num_samples(); }
  int64_t sample_len() const override { return 1; }
  uint64_t position() const override { return loader_.position(); }
  void set_position(uint64_t p) override { loader_.set_position(p); }
  Batch next(uint64_t global, uint64_t first, uint64_t count) override {
    return to_batch(loader_.next(global, first, count));
  }
  Batch at(const std::vector<uint64_t>& indices) const override { return to_batch(loader_.at(indices)); }

 private:
  static EncodedLoaderOptions options(const DataConfig& data, Split split, int64_t train_threads,
                                      const c10::Device& device) {
    EncodedLoaderOptions o;
    ImageTransform& t = o.transform;
    t.train = split == Split::Train;
    t.size = static_cast<int>(data.image_size);
    t.resize = static_cast<int>(data.resize_size);
    t.crop.scale_lo = data.crop_scale_min;
    parse_triple(data.mean, "data.mean", t.mean);
    parse_triple(data.stddev, "data.std", t.std);
    for (float s : t.std) CADRE_CONFIG_CHECK(s > 0, "data.std: every value must be positive, got '", data.stddev, "'");
    t.uint8_out = data.uint8;
    o.workers = decode_workers(data, train_threads);
    o.prefetch = static_cast<int>(data.prefetch);
    o.window = static_cast<uint64_t>(data.shuffle_window);
    o.alloc = host_buffer_tensor(device);
    return o;
  }
  Batch to_batch(ImageBatch b) const {
    const ImageTransform& t = loader_.options().transform;
    const int64_t n = static_cast<int64_t>(b.count), S = t.size;
    const at::Tensor flat = to_device(*std::static_pointer_cast<at::Tensor>(b.pixels.owner), device_);
    at::Tensor x;
    if (t.uint8_out) {
      // Normalised where the batch is used (on the device): bytes travel, floats do not.
      x = (flat.view({n, 3, S, S}).to(at::kFloat) / 255.0 - mean_) / std_;
    } else {
      x = flat.view(at::kFloat).view({n, 3, S, S});
    }
    // Labels travel as the pixels do: from pinned memory, without waiting, on a GPU.
    at::Tensor labels = at::empty({static_cast<int64_t>(b.labels.size())}, host_options(at::kLong, device_));
    std::copy(b.labels.begin(), b.labels.end(), labels.data_ptr<int64_t>());
    return {x, to_device(labels, device_)};
  }
  mutable EncodedImageLoader loader_;
  c10::Device device_;
  at::Tensor mean_, std_;  // [1, 3, 1, 1] float32 on device_
};

}  // namespace

std::unique_ptr<BatchSource> BatchSource::open(const std::string& dir, Split split, uint64_t seed, const DataConfig& data,
                                               int64_t train_threads, c10::Device device) {
  const std::string kind = manifest_read(dir).kind;
  if (kind == "images") return std::make_unique<ImageBatches>(dir, split, seed, device);
  if (kind == "encoded_images")
    return std::make_unique<EncodedImageBatches>(dir, split, seed, data, train_threads, device);
  return std::make_unique<TokenBatches>(dir, split, seed, data.train_on_prompt, device);
}

int64_t learned_targets(const Batch& batch) {
  return batch.target.ne(-100).sum().item<int64_t>();
}

}  // namespace cadre
