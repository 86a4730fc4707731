// What the trainer and text generation need from a model, and nothing about which model it
// is. Training: build and initialise it, parallelize it (tensor parallelism where the model
// has a plan, FSDP units, activation checkpointing), a loss on a batch, whether a dataset
// suits it, and how its parameters map to an external format. Generation (generate/, serve/):
// a language model's limits and its KV-cache Decoder. Each model lives in models/<name>/ and
// is built by models/registry.h from the config's `model:` section.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ckpt/state_dict_adapter.h"
#include "core/config.h"
#include "core/error.h"
#include "core/param_source.h"
#include "data/manifest.h"
#include "models/lora.h"
#include "shard/deferred_param.h"
#include "shard/device_mesh.h"
#include "shard/fully_shard.h"

namespace cadre {

// One micro-batch: token sequences and their shifted targets ([B, T] int64 each), or images
// [B, C, H, W] float32 and their labels [B] int64.
struct Batch {
  Batch() = default;
  Batch(at::Tensor input_, at::Tensor target_, std::vector<std::vector<int64_t>> documents_ = {})
      : input(std::move(input_)), target(std::move(target_)), documents(std::move(documents_)) {}
  at::Tensor input, target;
  // Packed token windows: the lengths of each window's documents, in order, summing to T. A
  // document attends only to itself and its positions start at 0; a target across a boundary
  // is -100. Empty: each window is one sequence.
  std::vector<std::vector<int64_t>> documents;
};

struct LossOutput {
  at::Tensor loss;       // mean over the batch, float32 scalar
  // Classifiers: the batch's correct predictions, an int64 scalar where the logits are (read
  // with the loss once per step: on a GPU no host synchronisation per micro-batch); undefined
  // for other models.
  at::Tensor correct;
};

struct DecodeOptions {
  int64_t slots = 1;    // sequences with a cache of their own
  int64_t max_len = 0;  // cached positions per slot; 0: the model's max_seq_len
  // float32 reproduces the training forward; bfloat16 stores the matrices in half the bytes
  // (decode reads every weight once per step, so it is faster where memory bandwidth limits).
  at::ScalarType weight_dtype = at::kFloat;
  // Where the weights and caches live and the forward runs. The CPU gets the batch-invariant
  // kernels; another device gets tensor operations (its own kernels), whose logits agree with
  // the CPU's to float32 rounding but are not promised batch-invariant. Logits come back on
  // the CPU either way: one copy per step, and sampling stays on the host.
  c10::Device device = c10::Device(c10::kCPU);
};

// One new token of one sequence: it goes to position length(slot) (plus the rows of that
// slot earlier in the same call).
struct DecodeRow {
  int64_t slot = 0;
  int64_t token = 0;
  bool logits = false;  // return this row's next-token logits
  int64_t adapter = -1;  // the LoRA adapter (Decoder::add_adapter's index) this row runs with; -1: the base
};

// A LoRA adapter a decoder serves beside its base (`cadre serve --lora`): each adapted layer's
// factors by the model's names ("<layer>.lora_a" [rank, in], "<layer>.lora_b" [out, rank],
// float32) and the scale alpha / rank.
struct LoraWeights {
  std::string name;  // for errors
  double scale = 0;
  std::map<std::string, at::Tensor> factors;
};

// KV-cache decoding (continuous batching): each call feeds new tokens only, any mix of prompt
// chunks and generated tokens from any slots, each attending to its own slot's cache. A
// decoder computes every row with shapes that do not depend on the other rows, so a
// sequence's logits are the same bits alone or batched, and whether its prompt came in one
// call or token by token: the scheduler's results rest on that.
class Decoder {
 public:
  virtual ~Decoder() = default;
  // Appends the rows to their slots' caches and returns the logits of the rows that asked
  // for them, in row order: [count, vocab] float32. Error when a slot would exceed max_len.
  virtual at::Tensor forward(const std::vector<DecodeRow>& rows) = 0;
  virtual void reset(int64_t slot) = 0;  // empties the slot's cache
  virtual int64_t length(int64_t slot) const = 0;
  virtual int64_t slots() const = 0;
  virtual int64_t max_len() const = 0;
  virtual int64_t vocab_size() const = 0;
  // Bytes of weights one decode step reads.
  virtual int64_t weight_bytes() const = 0;
  // The KV cache: bytes held now, and the most held at once since the decoder was built.
  virtual int64_t cache_bytes() const = 0;
  virtual int64_t cache_peak_bytes() const = 0;
  // Bytes one cached position of one slot takes, and the positions a slot's cache grows by at a
  // time: a slot at length n holds ceil(n / block) blocks. A decoder that allocates every slot's
  // whole context up front reports max_len() as its block.
  virtual int64_t cache_bytes_per_token() const = 0;
  virtual int64_t cache_block_tokens() const = 0;
  // Adds an adapter rows can name (DecodeRow::adapter); returns its index. A row with an adapter
  // gets y += scale * (x A^T) B^T on each adapted layer, computed for that row alone (the result
  // stays independent of the batch). ConfigError naming the adapter when its layers or shapes do
  // not fit the model, or the decoder serves none.
  virtual int64_t add_adapter(const LoraWeights& adapter) {
    throw ConfigError(str("LoRA adapter '", adapter.name, "': this decoder serves no adapters"));
  }
};

// What text generation needs from a language model before decoding: its limits, and a
// decoder over its current weights.
class CausalLm {
 public:
  virtual ~CausalLm() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int64_t max_seq_len() const = 0;
  // A decoder with its own copy of the weights (packed for decoding), so the model can be
  // freed once it is built. Error for options the model cannot meet (max_len beyond max_seq_len).
  // `weights` null: from the model's parameters; else read from it (a checkpoint or folder, in
  // the decode dtype as it is read), and the model may be built without storage (deferred).
  virtual std::unique_ptr<Decoder> decoder(const DecodeOptions& options, const ParamSource* weights) const = 0;
  std::unique_ptr<Decoder> decoder(const DecodeOptions& options) const { return decoder(options, nullptr); }
};

// One micro-batch on one rank, as activation_bytes sees it.
struct ActivationShape {
  int64_t batch = 1;          // samples per micro-batch on this rank
  int64_t seq_len = 1;        // tokens per sample (or pixels per side, for an image model)
  int64_t compute_bytes = 4;  // bytes per element of the compute dtype
  bool checkpointing = false; // parallel.activation_checkpointing
  int64_t tp_size = 1;
  bool cuda = false;          // on a GPU (where a model may take other kernels, e.g. fused attention)
  // Micro-batches whose activations are held at once (a pipeline stage's schedule: its forwards
  // whose backward has not run): what each keeps for its backward counts that many times, the
  // backward's working set once.
  int64_t in_flight = 1;
};

// A model's sequential trunk, as pipeline parallelism splits it (pipeline/stage_split.h): each
// block's parameter count, and those of what runs before the blocks (on the first stage) and
// after them (on the last). `tied`: parameters both ends use (a head tied to the embedding):
// the first and the last stage each hold them, and their gradients are summed across the two.
struct PipelineTrunk {
  std::vector<int64_t> block_params;
  int64_t before = 0, after = 0;
  std::vector<std::string> tied;
};

// One pipeline rank's share of the trunk: the blocks of each of its chunks, [begin, end) in the
// model's numbering (one chunk, or under the interleaved schedule chunk c is virtual stage
// c * pp_size + stage), and whether it holds the first virtual stage (it reads the batch's
// inputs through the embedding) and the last (the norm, the head and the loss).
struct PipelineStage {
  struct Blocks {
    int64_t begin = 0, end = 0;
  };
  std::vector<Blocks> chunks;
  bool first = true, last = true;
};

class Model {
 public:
  virtual ~Model() = default;

  virtual torch::nn::Module& module() = 0;
  // Deterministic initialisation from a seed (the same on every rank).
  virtual void init_weights(uint64_t seed) = 0;
  // The same initial values as a ParamSource, for a model built deferred (registry.h's
  // model_build): parallelize then fills each rank's shard from it. Null for a model that can
  // only initialise itself whole (its modules' own reset_parameters): it is built with storage,
  // initialised with init_weights and broadcast, as before.
  virtual std::shared_ptr<const ParamSource> init_source(uint64_t seed) const { return nullptr; }
  // Its parameters have no storage yet (built deferred).
  bool deferred() {
    for (const auto& p : module().parameters())
      if (has_no_storage(p)) return true;
    return false;
  }
  // ConfigError naming the key when the parallel section does not suit the model, before any
  // work starts. By default a model has no tensor-parallel plan and refuses tp_size > 1.
  virtual void check_parallel(const ParallelConfig& parallel) const {
    CADRE_CONFIG_CHECK(parallel.tp_size == 1, "parallel.tp_size ", parallel.tp_size, ": ", describe(),
                       " has no tensor-parallel plan (use 1)");
  }
  // Splits the model over the mesh's tp dimension where it has a plan (setting
  // options.tensor_parallel), then makes its FSDP units over options' groups (the dp
  // dimension) and activation checkpointing when parallel asks for it; returns the root's
  // handle. Called once, after init_weights (or, built deferred, with options.param_source
  // set) and before training.
  virtual FSDPModule parallelize(const DeviceMesh& mesh, FullyShardOptions options, const ParallelConfig& parallel) = 0;
  // Forward (through cadre::call, so units gather and free) and the loss.
  virtual LossOutput loss(const Batch& batch) = 0;

  // ConfigError when the dataset does not fit (vocabulary, sequence length, image shape).
  virtual void check_data(const DatasetManifest& data) const = 0;
  // "llama 35.7M parameters, 8 layers, dim 512": for the log.
  virtual std::string describe() const = 0;
  virtual int64_t param_count() const = 0;
  // Peak bytes of activations one micro-batch holds on one rank: what autograd keeps for the
  // backward, plus the working set of the backward's largest step; -1 where the model does not
  // say (the memory estimate then says it leaves them out).
  virtual int64_t activation_bytes(const ActivationShape& shape) const { return -1; }
  // Forward + backward FLOPs per sample; 0 when not modelled.
  virtual double flops_per_sample(int64_t sample_len) const { return 0; }
  // What one sample counts as in throughput figures: "tokens" (seq_len per sample) or "images".
  virtual const char* throughput_unit() const = 0;
  // What its layers are called, for lora.targets (models/lora.h); empty names (the default):
  // LoRA reaches its LoraLinear layers by their own names only.
  virtual LoraNames lora_names() const { return {}; }
  // Pipeline parallelism (parallel.pp_size; train/pipeline_run.h). A model that can be split
  // into stages gives its trunk; the default has none (pp_size > 1 is refused).
  virtual std::optional<PipelineTrunk> pipeline_trunk() const { return std::nullopt; }
  // Keeps only the stage's parts, before parallelize: a deferred model then allocates nothing
  // but the stage's parameters, and checkpoints name them as the whole model does.
  virtual void keep_pipeline_stage(const PipelineStage& stage) {
    throw ConfigError(str("parallel.pp_size: ", describe(), " cannot be split into pipeline stages"));
  }
  // One chunk's forward of one micro-batch (through cadre::call, as `loss`): the first virtual
  // stage reads batch.input, the others take `input`, the previous virtual stage's output.
  // Returns what the next virtual stage takes, or on the last what stage_loss takes.
  virtual at::Tensor stage_forward(const Batch& batch, const at::Tensor& input, int64_t chunk) {
    throw Error(str(describe(), " has no pipeline stages"));
  }
  virtual LossOutput stage_loss(const at::Tensor& output, const Batch& batch) {
    throw Error(str(describe(), " has no pipeline stages"));
  }
  // The shape of what crosses between stages for a micro-batch of `batch` samples of `sample_len`.
  virtual std::vector<int64_t> stage_activation_sizes(int64_t batch, int64_t sample_len) const {
    throw Error(str(describe(), " has no pipeline stages"));
  }

  // The model's text-generation side; null (the default) for one that does not generate text.
  virtual const CausalLm* causal_lm() const { return nullptr; }
};

}  // namespace cadre
