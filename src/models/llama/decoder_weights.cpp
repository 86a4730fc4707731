// Reading and packing a Llama decoder's weights.
#include "models/llama/decoder_weights.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <algorithm>
#include <map>
#include <string>

#include "core/error.h"

namespace cadre {
namespace {

constexpr int64_t kChunkElements = int64_t{4} << 20;  // 16 MiB of float32 read at a time

class WeightReader {
 public:
  WeightReader(const Llama& model, const ParamSource* source) : source_(source) {
    for (const auto& p : model.named_parameters()) params_[p.key()] = p.value();
  }

  // A new CPU tensor of `dtype` holding `names`' tensors one after another along dim 0.
  at::Tensor packed(const std::vector<std::string>& names, at::ScalarType dtype) {
    int64_t rows = 0;
    for (const auto& n : names) rows += param(n).size(0);
    std::vector<int64_t> shape = param(names.front()).sizes().vec();
    shape[0] = rows;
    at::Tensor out = at::empty(shape, dtype);
    int64_t row = 0;
    for (const auto& n : names) {
      const int64_t r = param(n).size(0);
      fill(n, out.narrow(0, row, r));
      row += r;
    }
    return out;
  }

 private:
  const at::Tensor& param(const std::string& name) const {
    auto it = params_.find(name);
    CADRE_CHECK(it != params_.end(), "decoder: the model has no parameter '", name, "'");
    return it->second;
  }

  void fill(const std::string& name, at::Tensor out) {  // `out` contiguous, the parameter's shape
    if (!source_) {
      out.copy_(param(name).detach());
      return;
    }
    const int64_t numel = out.numel(), chunk = std::min(numel, kChunkElements);
    if (out.scalar_type() == at::kFloat) {
      source_->read(name, 0, numel, out.data_ptr<float>());
      return;
    }
    if (buffer_.numel() < chunk) buffer_ = at::empty({chunk}, at::kFloat);
    at::Tensor flat = out.view({-1});
    for (int64_t done = 0; done < numel; done += chunk) {
      const int64_t n = std::min(chunk, numel - done);
      source_->read(name, done, n, buffer_.data_ptr<float>());
      flat.narrow(0, done, n).copy_(buffer_.narrow(0, 0, n));
    }
  }

  const ParamSource* source_;
  std::map<std::string, at::Tensor> params_;
  at::Tensor buffer_;
};

}  // namespace

int64_t LlamaDecoderWeights::bytes() const {
  int64_t bytes = embedding.nbytes() + norm.nbytes() + (head.is_same(embedding) ? 0 : head.nbytes());
  for (const auto& l : layers)
    bytes += l.attention_norm.nbytes() + l.ffn_norm.nbytes() + l.wqkv.nbytes() + l.wo.nbytes() + l.w13.nbytes() + l.w2.nbytes();
  return bytes;
}

LlamaDecoderWeights llama_decoder_weights(const Llama& model, const ParamSource* source, at::ScalarType dtype,
                                          const c10::Device& device) {
  c10::NoGradGuard no_grad;
  WeightReader reader(model, source);
  auto on_device = [&](at::Tensor t) { return device.is_cpu() ? t : t.to(device); };
  LlamaDecoderWeights w;
  w.embedding = on_device(reader.packed({"tok_embeddings.weight"}, dtype));
  w.norm = on_device(reader.packed({"norm.weight"}, at::kFloat));
  w.head = model.output ? on_device(reader.packed({"output.weight"}, dtype)) : w.embedding;
  for (size_t i = 0; i < model.layers->blocks.size(); ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LlamaDecoderWeights::Layer l;
    l.attention_norm = on_device(reader.packed({p + "attention_norm.weight"}, at::kFloat));
    l.ffn_norm = on_device(reader.packed({p + "ffn_norm.weight"}, at::kFloat));
    l.wqkv = on_device(reader.packed({p + "attention.wq.weight", p + "attention.wk.weight", p + "attention.wv.weight"}, dtype));
    l.wo = on_device(reader.packed({p + "attention.wo.weight"}, dtype));
    l.w13 = on_device(reader.packed({p + "feed_forward.w1.weight", p + "feed_forward.w3.weight"}, dtype));
    l.w2 = on_device(reader.packed({p + "feed_forward.w2.weight"}, dtype));
    w.layers.push_back(std::move(l));
  }
  return w;
}

}  // namespace cadre
