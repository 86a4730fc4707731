// Llama's tensor-parallel plan: which dimension of which parameter is split, applied in place.
#include "models/llama/tensor_parallel.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include "core/error.h"
#include "core/lora_naming.h"
#include "core/text.h"
#include "shard/deferred_param.h"

namespace cadre {
namespace {

// The dimension a parameter is split along (0: rows of [out, in], the column-parallel half
// and the vocabulary; 1: columns, the row-parallel half), or -1: replicated. A LoRA adapter's
// factors follow their layer's weight (models/lora_linear.h).
int split_dim(const std::string& name) {
  if (lora_is_adapter(name))
    return lora_factor_split_dim(split_dim(lora_layer_of(name) + ".weight"), ends_with(name, ".lora_a"));
  for (const char* rows : {"attention.wq.weight", "attention.wk.weight", "attention.wv.weight", "feed_forward.w1.weight",
                           "feed_forward.w3.weight", "tok_embeddings.weight", "output.weight"})
    if (ends_with(name, rows)) return 0;
  for (const char* cols : {"attention.wo.weight", "feed_forward.w2.weight"})
    if (ends_with(name, cols)) return 1;
  return -1;  // RMSNorm weights: every rank normalises the whole hidden state
}

}  // namespace

void llama_check_tensor_parallel(const LlamaConfig& c, int64_t tp) {
  if (tp == 1) return;
  CADRE_CONFIG_CHECK(c.n_heads % tp == 0, "parallel.tp_size ", tp, " does not divide model.n_heads (", c.n_heads,
                     "): each tensor-parallel rank computes whole attention heads");
  CADRE_CONFIG_CHECK(c.n_kv_heads % tp == 0, "parallel.tp_size ", tp, " does not divide model.n_kv_heads (",
                     c.n_kv_heads, "): each tensor-parallel rank holds the key/value heads its query heads share "
                     "(grouped-query attention)");
  CADRE_CONFIG_CHECK(llama_ffn_dim(c) % tp == 0, "parallel.tp_size ", tp,
                     " does not divide the feed-forward width (model.ffn_dim, resolved to ", llama_ffn_dim(c), ")");
  CADRE_CONFIG_CHECK(c.vocab_size % tp == 0, "parallel.tp_size ", tp, " does not divide model.vocab_size (",
                     c.vocab_size, "): the embedding and the head are split by vocabulary rows");
}

std::shared_ptr<TensorParallelLayout> llama_tensor_parallelize(Llama& model, comm::Communicator& group) {
  const int64_t tp = group.size(), t = group.rank();
  llama_check_tensor_parallel(model.config(), tp);
  auto layout = std::make_shared<TensorParallelLayout>();
  layout->group = &group;
  c10::NoGradGuard no_grad;
  for (auto& item : model.named_parameters(/*recurse=*/true)) {
    at::Tensor& p = item.value();
    Placement where;
    where.global_shape = p.sizes().vec();
    where.offsets.assign(where.global_shape.size(), 0);
    const int dim = split_dim(item.key());
    if (dim < 0) {
      where.replicated = true;
    } else {
      const int64_t part = where.global_shape[dim] / tp;
      where.offsets[dim] = t * part;
      // Only this rank's part stays (a deferred parameter: only its shape, filled when sharded).
      std::vector<int64_t> part_shape = where.global_shape;
      part_shape[dim] = part;
      p.set_data(has_no_storage(p) ? deferred_empty(part_shape) : p.narrow(dim, t * part, part).clone());
    }
    layout->params.emplace(item.key(), std::move(where));
  }
  for (const auto& item : model.named_modules("", /*include_self=*/false))
    if (auto layer = std::dynamic_pointer_cast<LoraLinear>(item.value()); layer && layer->has_adapter()) {
      layer->tp_group = &group;
      layer->tp_split = split_dim(item.key() + ".weight");
    }
  for (auto& block : model.layers->blocks) {
    block->attention->n_heads /= tp;
    block->attention->n_kv_heads /= tp;
    block->attention->tp_group = &group;
    block->feed_forward->tp_group = &group;
  }
  model.tp_group = &group;
  model.vocab_start = t * (model.config().vocab_size / tp);
  return layout;
}

}  // namespace cadre
