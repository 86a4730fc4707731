// Tensor parallelism for Llama, Megatron-LM's layout: attention heads and the feed-forward
// hidden width split across the tensor-parallel ranks (wq, wk, wv, w1, w3 column-parallel:
// rows; wo, w2 row-parallel: columns), the vocabulary split for the embedding and the head,
// norms replicated. Per block, one all-reduce after attention and one after the MLP in the
// forward, and their conjugates in the backward; the loss never gathers the logits.
#pragma once

#include <memory>

#include "comm/comm.h"
#include "models/llama/config.h"
#include "models/llama/model.h"
#include "shard/placement.h"

namespace cadre {

// ConfigError naming the key when tp_size does not divide the heads, the key/value heads, the
// feed-forward width or the vocabulary. Nothing to check for tp_size 1.
void llama_check_tensor_parallel(const LlamaConfig& config, int64_t tp_size);

// Splits an initialised model over `group` in place (each rank keeps its part, a fresh
// contiguous tensor, of every split parameter) and switches its forward to the tensor-parallel
// collectives. Returns where each parameter's part sits in the full tensor.
std::shared_ptr<TensorParallelLayout> llama_tensor_parallelize(Llama& model, comm::Communicator& group);

}  // namespace cadre
