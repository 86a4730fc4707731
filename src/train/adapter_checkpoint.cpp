// Adapter-only checkpoints: the base's fingerprint (adapter_checkpoint.h).
#include "train/adapter_checkpoint.h"

#include <ATen/ATen.h>

#include "core/error.h"
#include "core/value_fingerprint.h"
#include "models/registry.h"
#include "train/checkpointing.h"
#include "train/init_from.h"

namespace cadre {
namespace {

// This rank's share of the fingerprint: the frozen pieces it writes, element by element at
// their flat index in the global tensor.
uint64_t frozen_share(FSDPModule& model) {
  const auto& layout = model.frozen_piece_layout();
  const TensorParallelLayout* tp = model.tensor_parallel();
  uint64_t sum = 0;
  for (size_t k : pieces_this_rank_writes(model, layout)) {
    const ShardPiece& where = layout[k];
    const at::Tensor values = model.frozen_parameters()[k].detach().to(at::kCPU).contiguous();
    const GlobalPlace place = global_place(where, tp);
    const uint64_t key = value_fingerprint_key(where.name);
    for (const Run& run : box_runs(place.shape, place.part, where.start, values.numel())) {
      const int64_t at = run.pos - where.start;
      if (values.scalar_type() == at::kBFloat16)
        sum += value_fingerprint_bf16(key, run.at, reinterpret_cast<const uint16_t*>(values.data_ptr()) + at, run.count);
      else
        sum += value_fingerprint(key, run.at, values.data_ptr<float>() + at, run.count);
    }
  }
  return sum;
}

}  // namespace

uint64_t frozen_base_fingerprint(FSDPModule& model, comm::Communicator* world) {
  const uint64_t mine = frozen_share(model);
  if (!world) return mine;
  // Summed as four 16-bit lanes, so that no int64 sum overflows; added back mod 2^64.
  at::Tensor lanes = at::empty({4}, at::kLong);
  for (int i = 0; i < 4; ++i) lanes[i] = static_cast<int64_t>((mine >> (16 * i)) & 0xffffu);
  world->all_reduce(lanes);
  uint64_t sum = 0;
  for (int i = 0; i < 4; ++i) sum += static_cast<uint64_t>(lanes[i].item<int64_t>()) << (16 * i);
  return sum;
}

std::string base_description(const Config& c) {
  if (c.train.init_from.empty()) return str("the initialisation of train.seed ", c.train.seed);
  return str(init_from_hf(c) ? "the Hugging Face folder '" : "the checkpoint '", c.train.init_from, "'");
}

BaseWeights adapter_base_weights(const Config& c) {
  const std::unique_ptr<Model> model = model_build(c, /*deferred=*/true);  // shapes only
  BaseWeights out;
  for (const auto& p : model->module().named_parameters()) out.shapes[p.key()] = p.value().sizes().vec();
  out.source = base_param_source(c, *model).source;  // as the run read it (set_up_deferred)
  out.description = base_description(c);
  return out;
}

void check_adapter_base(const CheckpointReader& reader, const Config& c, std::optional<uint64_t> here) {
  const auto& state = reader.manifest().state;
  const auto found = state.find(kBaseFingerprintState);
  if (found == state.end()) return;
  CADRE_CONFIG_CHECK(here.has_value(), "checkpoint '", reader.dir(), "' holds LoRA adapters without their base; "
                     "this run trains no adapters (lora.rank 0): resume it with the lora.* settings it was trained "
                     "with, or export it (cadre ckpt export --format peft, or --format hf --merge)");
  const uint64_t there = static_cast<uint64_t>(found->second);
  CADRE_CONFIG_CHECK(there == *here, "checkpoint '", reader.dir(), "' holds LoRA adapters trained on another base "
                     "(base fingerprint ", value_fingerprint_text(there), " there, ", value_fingerprint_text(*here),
                     " for this run's base, ", base_description(c), "): start from the base that run started from "
                     "(train.init_from, train.seed)");
}

}  // namespace cadre
