// LlamaDecodeAdapters (decode_adapters.h).
#include "models/llama/decode_adapters.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <regex>

#include "core/error.h"
#include "models/batch_invariant_linear.h"

namespace cadre {
namespace {

// "layers.<n>.attention.wq.lora_a" -> (n, Q, true).
struct FactorName {
  int64_t layer = -1;
  LlamaDecodeAdapters::Projection projection = LlamaDecodeAdapters::Q;
  bool a = true;
};

bool parse_factor(const std::string& name, FactorName& out) {
  static const std::regex pattern(R"(^layers\.(\d+)\.(attention\.w[qkvo]|feed_forward\.w[123])\.lora_([ab])$)");
  std::smatch m;
  if (!std::regex_match(name, m, pattern)) return false;
  static const std::vector<std::pair<std::string, LlamaDecodeAdapters::Projection>> kinds = {
      {"attention.wq", LlamaDecodeAdapters::Q},       {"attention.wk", LlamaDecodeAdapters::K},
      {"attention.wv", LlamaDecodeAdapters::V},       {"attention.wo", LlamaDecodeAdapters::O},
      {"feed_forward.w1", LlamaDecodeAdapters::Gate}, {"feed_forward.w3", LlamaDecodeAdapters::Up},
      {"feed_forward.w2", LlamaDecodeAdapters::Down}};
  out.layer = std::stoll(m[1]);
  for (const auto& [path, p] : kinds)
    if (m[2] == path) out.projection = p;
  out.a = m[3] == "a";
  return true;
}

}  // namespace

LlamaDecodeAdapters::LlamaDecodeAdapters(const LlamaConfig& config, at::ScalarType factor_dtype)
    : config_(config), factor_dtype_(factor_dtype), head_dim_(config.dim / config.n_heads), ffn_(llama_ffn_dim(config)) {}

int64_t LlamaDecodeAdapters::in_features(Projection p) const {
  if (p == O) return config_.n_heads * head_dim_;
  return p == Down ? ffn_ : config_.dim;
}

int64_t LlamaDecodeAdapters::out_features(Projection p) const {
  switch (p) {
    case Q: return config_.n_heads * head_dim_;
    case K:
    case V: return config_.n_kv_heads * head_dim_;
    case Gate:
    case Up: return ffn_;
    default: return config_.dim;  // O, Down
  }
}

int64_t LlamaDecodeAdapters::offset(Projection p) const {
  if (p == K) return config_.n_heads * head_dim_;
  if (p == V) return (config_.n_heads + config_.n_kv_heads) * head_dim_;
  return p == Up ? ffn_ : 0;
}

int64_t LlamaDecodeAdapters::add(const LoraWeights& w) {
  CADRE_CONFIG_CHECK(w.scale > 0, "LoRA adapter '", w.name, "': scale ", w.scale, " (alpha / rank) must be > 0");
  Adapter adapter{w.name, w.scale, std::vector<std::array<Factors, kProjections>>(size_t(config_.n_layers))};
  for (const auto& [name, t] : w.factors) {
    FactorName f;
    CADRE_CONFIG_CHECK(parse_factor(name, f) && f.layer < config_.n_layers, "LoRA adapter '", w.name, "' has '", name,
                       "': served adapters apply to the blocks' projections only");
    const std::vector<int64_t> want = f.a ? std::vector<int64_t>{-1, in_features(f.projection)}
                                          : std::vector<int64_t>{out_features(f.projection), -1};
    CADRE_CONFIG_CHECK(t.dim() == 2 && (want[0] < 0 || t.size(0) == want[0]) && (want[1] < 0 || t.size(1) == want[1]),
                       "LoRA adapter '", w.name, "': ", name, " is ", t.sizes(), ", which does not fit the model's layer");
    Factors& slot = adapter.layers[size_t(f.layer)][f.projection];
    (f.a ? slot.a : slot.bt) = f.a ? t.to(factor_dtype_).contiguous() : t.to(factor_dtype_).t().contiguous();
  }
  for (size_t l = 0; l < adapter.layers.size(); ++l)
    for (const Factors& f : adapter.layers[l])
      CADRE_CONFIG_CHECK(f.a.defined() == f.bt.defined() && (!f.a.defined() || f.a.size(0) == f.bt.size(0)),
                         "LoRA adapter '", w.name, "': a factor of block ", l, " has no partner of its rank");
  adapters_.push_back(std::move(adapter));
  return count() - 1;
}

bool LlamaDecodeAdapters::used_by(const std::vector<DecodeRow>& rows) const {
  bool any = false;
  for (const auto& r : rows) {
    CADRE_CHECK(r.adapter < count(), "decoder: row names adapter ", r.adapter, " of ", count());
    any = any || r.adapter >= 0;
  }
  return any;
}

void LlamaDecodeAdapters::apply(int64_t layer, Projection p, const std::vector<DecodeRow>& rows, const at::Tensor& x,
                                at::Tensor& y) const {
  const int64_t in = in_features(p), out = out_features(p), first = offset(p);
  CADRE_CHECK(x.is_contiguous() && y.is_contiguous() && x.size(1) == in && y.size(1) >= first + out,
              "decoder: adapter input is not [rows, ", in, "] or its output has no columns ", first, "..", first + out);
  const float* xs = x.data_ptr<float>();
  float* ys = y.data_ptr<float>();
  // The rows with an adapter here, grouped by adapter: a factor read for one row is still in
  // cache for the next (a rank-16 factor of a 1B model's projection is 128-512 KiB; 4 adapters'
  // factors of all blocks are ~180 MB, so rows in request order would stream them per row).
  // Each row's arithmetic is its own either way, so the order changes no bit.
  std::vector<int64_t> order;
  for (int64_t r = 0; r < static_cast<int64_t>(rows.size()); ++r) {
    const int64_t adapter = rows[size_t(r)].adapter;
    if (adapter >= 0 && adapters_[size_t(adapter)].layers[size_t(layer)][p].a.defined()) order.push_back(r);
  }
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t i, int64_t j) { return rows[size_t(i)].adapter < rows[size_t(j)].adapter; });
  at::parallel_for(0, static_cast<int64_t>(order.size()), 1, [&](int64_t k0, int64_t k1) {
    std::vector<float> h;
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t r = order[size_t(k)], adapter = rows[size_t(r)].adapter;
      const Factors& f = adapters_[size_t(adapter)].layers[size_t(layer)][p];
      h.resize(size_t(f.a.size(0)));
      batch_invariant_lowrank_add(xs + r * in, f.a, f.bt, static_cast<float>(adapters_[size_t(adapter)].scale),
                                  h.data(), ys + r * y.size(1) + first);
    }
  });
}

}  // namespace cadre
