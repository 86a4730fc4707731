// A bias-free linear layer that can carry a LoRA adapter (Hu et al. 2021, "LoRA: Low-Rank
// Adaptation of Large Language Models"; as PEFT's lora.Linear):
//   y = x W^T + scale * (dropout(x) A^T) B^T,   W [out, in], A [rank, in], B [out, rank],
// scale = alpha / rank. Models build their linear layers from it, so that lora.* (models/lora.h)
// can adapt any of them by name; without an adapter it is y = x W^T and nothing more.
#pragma once

#include <torch/nn/module.h>

#include <string>

#include "comm/comm.h"

namespace cadre {

class LoraLinear : public torch::nn::Module {
 public:
  // Deferred: W has a shape and no storage (shard/deferred_param.h), filled when sharded.
  LoraLinear(int64_t in, int64_t out, bool deferred = false);
  at::Tensor forward(const at::Tensor& x) const;

  // Registers lora_a [rank, in] and lora_b [out, rank], without storage when W has none, else
  // uninitialised (models/lora.h gives their values). Once per layer.
  // `name`: the layer's name in the model, which keys its dropout masks (models/lora_dropout.h).
  void add_adapter(int64_t rank, double alpha, double dropout, std::string name = "");
  bool has_adapter() const { return lora_a.defined(); }

  at::Tensor weight, lora_a, lora_b;
  double scale = 0, dropout = 0;
  std::string name;

  // Tensor parallelism (set by the model's plan with W's split): 0 column-parallel (W's rows
  // split; B's rows with them, A whole), 1 row-parallel (W's columns split; A's columns with
  // them, B whole), -1 not split.
  comm::Communicator* tp_group = nullptr;
  int tp_split = -1;

 private:
  at::Tensor adapter(const at::Tensor& x) const;
};

// The dimension an adapter factor is split along under tensor parallelism, given the dimension
// its layer's W is split along (see LoraLinear::tp_split); -1: every rank holds it whole.
int lora_factor_split_dim(int weight_split_dim, bool factor_a);

}  // namespace cadre
