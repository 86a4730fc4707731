// KV-cache decoding for Llama through tensor operations, so it runs on any device (a GPU's
// kernels, or the CPU's for its tests): weights and caches live on the device, every step
// copies its indices there (tokens, positions, slots: one buffer, one copy) and the requested
// logits back, nothing else crosses.
// The CPU keeps LlamaDecoder (decode.h), whose hand-written kernels make every row's bits
// independent of the batch; this one makes no such promise (cuBLAS picks its kernel by shape),
// so greedy tokens match the CPU decoder's while logits agree to float32 rounding.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <vector>

#include "core/param_source.h"
#include "models/llama/decoder_weights.h"
#include "models/llama/model.h"
#include "models/model.h"

namespace cadre {

class LlamaDeviceDecoder : public Decoder {
 public:
  // Copies the weights it needs to options.device (packed as LlamaDecoder packs them), from the
  // model's parameters or from `weights` when given.
  LlamaDeviceDecoder(const Llama& model, DecodeOptions options, const ParamSource* weights = nullptr);

  at::Tensor forward(const std::vector<DecodeRow>& rows) override;  // logits on the CPU
  void reset(int64_t slot) override;
  int64_t length(int64_t slot) const override { return lengths_.at(static_cast<size_t>(slot)); }
  int64_t slots() const override { return options_.slots; }
  int64_t max_len() const override { return options_.max_len; }
  int64_t vocab_size() const override { return config_.vocab_size; }
  int64_t weight_bytes() const override;
  int64_t cache_bytes() const override;  // allocated up front: every slot's whole context
  int64_t cache_peak_bytes() const override { return cache_bytes(); }
  int64_t cache_bytes_per_token() const override;
  int64_t cache_block_tokens() const override { return options_.max_len; }

 private:
  struct Layer : LlamaDecoderWeights::Layer {
    at::Tensor k_cache, v_cache;  // weight dtype [slots, n_kv_heads, max_len, head_dim]
  };
  at::Tensor linear(const at::Tensor& x, const at::Tensor& weight) const;
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  at::Tensor rope(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) const;
  // One step's indices on the device, shared by every layer.
  struct StepIndex {
    struct SlotRows {
      int64_t slot = 0;
      int64_t n = 0;             // cache positions its rows attend over (its last row's position + 1)
      at::Tensor rows;           // [m] long: its rows among the step's
      at::Tensor future;         // [1, m, n] bool: the keys each row must not see
    };
    at::Tensor positions, slots, tokens, wanted;  // [R], [R], [R], [rows whose logits are wanted]
    std::vector<SlotRows> groups;
  };
  StepIndex step_index(const std::vector<int64_t>& positions, const std::vector<int64_t>& slots,
                       const std::vector<int64_t>& tokens, const std::vector<int64_t>& wanted) const;
  at::Tensor attention(const Layer& layer, const StepIndex& index, const at::Tensor& q) const;

  LlamaConfig config_;
  DecodeOptions options_;
  int64_t head_dim_ = 0, weight_bytes_ = 0;
  at::Tensor embedding_, norm_, head_;  // on the device; embedding and head weight_dtype (one when tied)
  at::Tensor rope_cos_, rope_sin_;      // [max_seq_len, head_dim] float32, on the device
  std::vector<Layer> layers_;
  std::vector<int64_t> lengths_;
};

}  // namespace cadre
