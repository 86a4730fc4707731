// The vocabulary split across a tensor-parallel group: rank t holds rows
// [vocab_start, vocab_start + V/tp) of the embedding table and of the output head, so no rank
// stores the whole table or computes all the logits. The lookup masks the ids outside its rows
// and sums the partial embeddings; the cross-entropy combines per-row maxima, sums of
// exponentials and target logits across ranks (two all-reduces of one float per token)
// instead of gathering logits.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "comm/comm.h"

namespace cadre {

// tokens [...] int64 (global ids), weight [V_local, dim] (rows vocab_start..): the embedding
// of every token, summed over `group`, identical on every rank.
at::Tensor vocab_parallel_embedding(const at::Tensor& weight, const at::Tensor& tokens, int64_t vocab_start,
                                    comm::Communicator& group);

// logits [N, V_local] (columns vocab_start.. of the full logits, any float dtype), targets [N]
// int64 global ids or -100: the mean cross-entropy over the rows whose target is not -100,
// float32, identical on every rank; equal to at::cross_entropy_loss over the gathered logits up
// to rounding (NaN, as there, when every row is -100). The backward needs no communication: each
// rank's gradient is its columns of softmax - one_hot over the counted rows, 0 on ignored ones.
at::Tensor vocab_parallel_cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t vocab_start,
                                        comm::Communicator& group);

}  // namespace cadre
