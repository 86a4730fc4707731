// The Model interface over the Llama module.
#include "models/llama/llama_model.h"

#include "core/error.h"
#include "models/llama/activation_memory.h"
#include "models/llama/decode.h"
#include "models/llama/decode_device.h"
#include "models/llama/parallelize.h"
#include "models/llama/tensor_parallel.h"

namespace cadre {

LlamaModel::LlamaModel(const LlamaConfig& config, bool deferred)
    : config_(config), llama_(std::make_shared<Llama>(config, deferred)) {}

void LlamaModel::check_parallel(const ParallelConfig& parallel) const {
  llama_check_tensor_parallel(config_, parallel.tp_size);
}

FSDPModule LlamaModel::parallelize(const DeviceMesh& mesh, FullyShardOptions options, const ParallelConfig& parallel) {
  return llama_parallelize(*llama_, mesh, std::move(options), parallel, checkpointing_);
}

LossOutput LlamaModel::loss(const Batch& batch) { return stage_loss(call(llama_, batch.input, batch.documents), batch); }

// Before the blocks: the embedding; after: the final norm and the head (a tied one on its own
// copy of the embedding's table, which the first and the last stage both hold).
std::optional<PipelineTrunk> LlamaModel::pipeline_trunk() const {
  PipelineTrunk trunk;
  const int64_t block = (llama_param_count(config_) - config_.dim -
                         config_.vocab_size * config_.dim * (config_.tie_embeddings ? 1 : 2)) /
                        config_.n_layers;
  trunk.block_params.assign(size_t(config_.n_layers), block);
  trunk.before = config_.vocab_size * config_.dim;
  trunk.after = config_.dim + config_.vocab_size * config_.dim;
  if (config_.tie_embeddings) trunk.tied = {"tok_embeddings.weight"};
  return trunk;
}

void LlamaModel::keep_pipeline_stage(const PipelineStage& stage) {
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (const auto& chunk : stage.chunks) ranges.emplace_back(chunk.begin, chunk.end);
  llama_->keep_stage(ranges, stage.first, stage.last);
  chunks_ = stage.chunks;
}

at::Tensor LlamaModel::stage_forward(const Batch& batch, const at::Tensor& input, int64_t chunk) {
  CADRE_CHECK(chunk >= 0 && size_t(chunk) < chunks_.size(), "LlamaModel: pipeline chunk ", chunk, " of ",
              chunks_.size(), " this stage holds");
  const PipelineStage::Blocks blocks = chunks_[size_t(chunk)];
  const bool embeds = blocks.begin == 0 && llama_->has_embedding();
  return call(llama_, embeds ? batch.input : input, batch.documents, blocks.begin, blocks.end);
}

LossOutput LlamaModel::stage_loss(const at::Tensor& output, const Batch& batch) {
  LossOutput out;
  out.loss = llama_->loss(output, batch.target);
  return out;
}

void LlamaModel::check_data(const DatasetManifest& m) const {
  CADRE_CONFIG_CHECK(m.kind == "tokens", "data.dir holds ", m.kind, " samples; model.arch llama trains on tokens");
  CADRE_CONFIG_CHECK(m.vocab_size <= config_.vocab_size, "vocabulary mismatch: the dataset was tokenized with ",
                     m.vocab_size, " tokens but model.vocab_size is ", config_.vocab_size);
  CADRE_CONFIG_CHECK(m.seq_len <= config_.max_seq_len, "the dataset has samples of seq_len ", m.seq_len,
                     ", beyond model.max_seq_len ", config_.max_seq_len);
}

std::string LlamaModel::describe() const {
  return str("llama ", param_count() / 1e6, "M parameters, ", config_.n_layers, " layers, dim ", config_.dim);
}

int64_t LlamaModel::param_count() const { return llama_param_count(config_); }

std::unique_ptr<Decoder> LlamaModel::decoder(const DecodeOptions& options, const ParamSource* weights) const {
  if (options.device.is_cpu()) return std::make_unique<LlamaDecoder>(*llama_, options, weights);
  return std::make_unique<LlamaDeviceDecoder>(*llama_, options, weights);
}

int64_t LlamaModel::activation_bytes(const ActivationShape& shape) const {
  LlamaFrozenParts frozen;
  for (const auto& block : llama_->layers->blocks) {
    bool projections_frozen = true;
    for (const auto& p : block->parameters())
      if (p.dim() == 2) projections_frozen = projections_frozen && !p.requires_grad();
    frozen.blocks.push_back(projections_frozen);
  }
  // A pipeline stage without the embedding or head keeps no activations of theirs.
  frozen.embedding = !llama_->has_embedding() || !llama_->tok_embeddings->weight.requires_grad();
  frozen.head = !llama_->has_head() || !llama_->output_weight().requires_grad();
  frozen.blocks_held = int64_t(llama_->layers->blocks.size());
  frozen.head_held = llama_->has_head();
  return llama_activation_bytes(config_, shape, frozen);
}

LoraNames LlamaModel::lora_names() const {
  LoraNames names;
  names.aliases = {{"q_proj", "wq"},      {"k_proj", "wk"},    {"v_proj", "wv"},      {"o_proj", "wo"},
                   {"gate_proj", "w1"},   {"up_proj", "w3"},   {"down_proj", "w2"},   {"lm_head", "output"}};
  names.defaults = {"wq", "wk", "wv", "wo"};  // the attention projections
  names.not_all_linear = {"output"};
  return names;
}

double LlamaModel::flops_per_sample(int64_t seq_len) const {
  return llama_flops_per_token(config_, seq_len) * double(seq_len);
}

}  // namespace cadre
