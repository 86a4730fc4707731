// Staging the trainer's state into checkpoint slices, and loading it back under any layout.
#include "train/checkpointing.h"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/GradMode.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "ckpt/checkpoint_fit.h"
#include "ckpt/host_staging.h"
#include "core/config.h"
#include "core/error.h"
#include "core/shape_text.h"

namespace cadre {
namespace {

// Written by this rank: a tensor-parallel copy of a replicated parameter only by the first
// rank of the group (data-parallel replicas are sorted out by the caller).
bool writes_tensor_parallel_copy(const ShardPiece& where, const TensorParallelLayout* tp) {
  if (!tp || !tp->group) return true;
  const Placement* p = tp->find(where.name);
  return (p && !p->replicated) || tp->group->rank() == 0;
}

// Buffers are the same on every rank of the model's data-parallel group (broadcast from its first
// rank each training step, shard/fsdp_buffers.cpp) and of its tensor-parallel group: their first
// rank writes them. Under pipeline stages that is one rank per stage, each stage's model holding
// its own buffers (world rank 0 alone would leave the later stages' out).
bool writes_buffers(FSDPModule& model) {
  const TensorParallelLayout* tp = model.tensor_parallel();
  return model.replica_index() == 0 && model.shard_index() == 0 && (!tp || !tp->group || tp->group->rank() == 0);
}

// A CPU tensor is read in place, as the staging goes; a device tensor's copy is queued in
// `staging` (HostStaging: page-locked buffers, copies that do not wait for the device) and its
// pieces are filled by the writer. `cpu_too`: CPU tensors take the device path (for tests).
struct Staging {
  std::shared_ptr<HostStaging> copies = std::make_shared<HostStaging>();
  CpuStaging cpu = CpuStaging::Copy;
  bool queues(const at::Tensor& t) const { return cpu == CpuStaging::Queue || !t.device().is_cpu(); }
  bool borrows(const at::Tensor& t) const { return cpu == CpuStaging::Borrow && t.device().is_cpu(); }
};

// Reads a checkpoint range (float32: check_checkpoint_fits) into `t` wherever it lives:
// directly into float32 CPU memory, else through a host buffer (a device tensor, so a
// checkpoint saved on one device loads on another; a frozen piece kept in bf16).
void read_into(const CheckpointReader& reader, const std::string& name, const Box& part, int64_t start,
               const at::Tensor& t) {
  if (t.device().is_cpu() && t.scalar_type() == at::kFloat) return reader.read(name, part, start, t.numel(), t.data_ptr());
  at::Tensor host = at::empty({t.numel()}, t.options().device(at::kCPU).dtype(at::kFloat));
  reader.read(name, part, start, t.numel(), host.data_ptr());
  t.view({-1}).copy_(host);
}

// Checkpoint dtype names of the parameter dtypes staged: float32, and bf16 for a frozen piece
// kept in the compute dtype (only in-memory copies take those: a LoRA run's checkpoints leave
// its base out).
const char* param_dtype(const at::Tensor& t, const std::string& name) {
  CADRE_CHECK(t.is_contiguous() && (t.scalar_type() == at::kFloat || t.scalar_type() == at::kBFloat16),
              "checkpoint: '", name, "' is not a contiguous float32 or bfloat16 tensor");
  return t.scalar_type() == at::kFloat ? "float32" : "bfloat16";
}

void stage_param(Snapshot& snapshot, Staging& staging, const std::string& name, const ShardPiece& where,
                 const GlobalPlace& place, const at::Tensor& values) {
  const char* dtype = param_dtype(values, name);
  const size_t element = values.element_size();
  const char* from = static_cast<const char*>(values.data_ptr());
  std::vector<size_t> pieces;
  for (const Box& box : box_split_range(place.part, where.start, values.numel())) {
    if (staging.borrows(values)) {
      snapshot.add_borrowed({name, dtype, place.shape, box}, from);
      from += static_cast<size_t>(box.numel()) * element;
      continue;
    }
    char* out = snapshot.add({name, dtype, place.shape, box});
    if (staging.queues(values)) {
      pieces.push_back(snapshot.pieces().size() - 1);
      continue;
    }
    const size_t bytes = static_cast<size_t>(box.numel()) * element;
    std::memcpy(out, from, bytes);
    from += bytes;
  }
  if (!pieces.empty()) staging.copies->add(values, std::move(pieces));
}

// Checkpoint dtype names of the buffer dtypes Cadre stores.
std::string buffer_dtype(const at::Tensor& t, const std::string& name) {
  switch (t.scalar_type()) {
    case at::kFloat: return "float32";
    case at::kLong: return "int64";
    default: throw Error(str("checkpoint: buffer '", name, "' has dtype ", t.scalar_type(), " (float32 and int64 are stored)"));
  }
}

// The optimizer's state kinds must be exactly the checkpoint's optim.<state>.* ones: another
// optimizer's state (AdamW's moments for SGD) cannot continue it. The checkpoint's config
// names its optimizer, so the message can say what to set.
void check_optimizer_fits(const CheckpointReader& reader, Optimizer& optimizer) {
  std::set<std::string> stored, expected;
  for (const auto& [name, record] : reader.manifest().tensors) {
    if (name.rfind("optim.", 0) != 0) continue;
    const size_t dot = name.find('.', 6);
    stored.insert(name.substr(6, dot == std::string::npos ? std::string::npos : dot - 6));
  }
  for (const OptimizerState& s : optimizer.state()) expected.insert(s.name);
  if (stored == expected) return;
  auto list = [](const std::set<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
    return out.empty() ? std::string("none") : out;
  };
  std::string written_with;
  try {
    const Config c = config_parse(reader.manifest().config_yaml, reader.dir(), {});
    written_with = str(" (it was written with optim.name ", c.optim.name, ", optim.momentum ", c.optim.momentum, ")");
  } catch (const ConfigError& e) {
    written_with = str(" (its config does not parse here: ", e.what(), ")");
  }
  throw ConfigError(str("checkpoint '", reader.dir(), "' holds optimizer state ", list(stored), written_with,
                        " but this run's optimizer keeps ", list(expected),
                        ": set optim.* as that run did, or start from its weights with train.init_from"));
}

at::Tensor rng_state() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}

// The bytes of every piece stage_train_state adds, in the order it adds them: each of this
// rank's shard pieces (the parameter, then each optimizer state), its frozen pieces, the
// buffers, the RNG state.
std::vector<size_t> staged_sizes(FSDPModule& model, const std::vector<size_t>& mine, size_t states,
                                 const std::vector<size_t>& frozen,
                                 const std::vector<std::pair<std::string, at::Tensor>>& buffers, const at::Tensor& rng,
                                 const Staging& staging) {
  const TensorParallelLayout* tp = model.tensor_parallel();
  std::vector<size_t> sizes;
  auto add = [&](const ShardPiece& where, const at::Tensor& piece, size_t copies) {
    if (staging.borrows(piece)) return;  // (its optimizer states live where it does)
    for (size_t copy = 0; copy < copies; ++copy)
      for (const Box& box : box_split_range(global_place(where, tp).part, where.start, piece.numel()))
        sizes.push_back(static_cast<size_t>(box.numel()) * piece.element_size());
  };
  for (size_t k : mine) add(model.piece_layout()[k], model.parameters()[k], states + 1);
  for (size_t k : frozen) add(model.frozen_piece_layout()[k], model.frozen_parameters()[k], 1);
  for (const auto& b : buffers) sizes.push_back(static_cast<size_t>(b.second.nbytes()));
  sizes.push_back(static_cast<size_t>(rng.numel()));
  return sizes;
}

}  // namespace

GlobalPlace global_place(const ShardPiece& where, const TensorParallelLayout* tp) {
  const Placement* p = tp ? tp->find(where.name) : nullptr;
  if (!p) return {where.shape, box_whole(where.shape)};
  return {p->global_shape, {p->offsets, where.shape}};
}

std::vector<size_t> pieces_this_rank_writes(FSDPModule& model, const std::vector<ShardPiece>& layout) {
  const TensorParallelLayout* tp = model.tensor_parallel();
  std::vector<size_t> mine;
  const std::set<std::string>& mirrored = model.mirrored();  // written by the stage they mirror
  for (size_t k = 0; k < layout.size(); ++k)
    if (static_cast<int>(layout[k].unit % model.replica_count()) == model.replica_index() &&
        writes_tensor_parallel_copy(layout[k], tp) && !mirrored.count(layout[k].name))
      mine.push_back(k);
  return mine;
}

void stage_train_state(Snapshot& snapshot, FSDPModule& model, Optimizer& optimizer, int rank, CpuStaging cpu,
                       FrozenStaging frozen_staging) {
  const auto& layout = model.piece_layout();
  const auto& pieces = model.parameters();
  const TensorParallelLayout* tp = model.tensor_parallel();
  const std::vector<OptimizerState> state = optimizer.state();
  const std::vector<size_t> mine = pieces_this_rank_writes(model, layout);
  const std::vector<size_t> frozen = frozen_staging == FrozenStaging::Include
                                         ? pieces_this_rank_writes(model, model.frozen_piece_layout())
                                         : std::vector<size_t>{};
  std::vector<std::pair<std::string, at::Tensor>> buffers;
  if (writes_buffers(model))
    for (const auto& [name, t] : model.unsharded_state()) buffers.emplace_back(name, t.contiguous());
  at::Tensor rng = rng_state();

  Staging staging;
  staging.cpu = cpu;
  snapshot.reserve(staged_sizes(model, mine, state.size(), frozen, buffers, rng, staging));

  for (size_t k : mine) {
    const ShardPiece& where = layout[k];
    const GlobalPlace place = global_place(where, tp);
    stage_param(snapshot, staging, "model." + where.name, where, place, pieces[k]);
    for (const OptimizerState& s : state)
      stage_param(snapshot, staging, "optim." + s.name + "." + where.name, where, place, (*s.tensors)[k]);
  }
  for (size_t k : frozen) {  // no optimizer state
    const ShardPiece& where = model.frozen_piece_layout()[k];
    stage_param(snapshot, staging, "model." + where.name, where, global_place(where, tp), model.frozen_parameters()[k]);
  }
  for (const auto& [name, values] : buffers) {
    const std::string dtype = buffer_dtype(values, name);
    char* out = snapshot.add({"buffer." + name, dtype, values.sizes().vec(), box_whole(values.sizes().vec()), 0});
    if (staging.queues(values))
      staging.copies->add(values, {snapshot.pieces().size() - 1});
    else
      std::memcpy(out, values.data_ptr(), static_cast<size_t>(values.nbytes()));
  }
  char* out = snapshot.add({str("rng.cpu.rank", rank), "uint8", {rng.numel()}, box_whole({rng.numel()}), 0});
  std::memcpy(out, rng.data_ptr(), static_cast<size_t>(rng.numel()));
  if (staging.copies->queued() == 0) return;
  // The copies read the shards, moments and buffers on their device's current stream, the
  // stream the next optimizer step updates them on; the buffers' broadcast and the gradients'
  // collectives wait on that stream too (NcclGroup), and nothing else writes them. The stream's
  // order keeps every later write behind the copies, so neither the training thread nor the
  // stream waits here; only the writer waits for them (Snapshot::finish), before it reads.
  staging.copies->start();
  snapshot.defer([copies = staging.copies](Snapshot& s) { copies->finish(s); });
}

void check_checkpoint_fits(const CheckpointReader& reader, FSDPModule& model, Optimizer* optimizer,
                           const std::set<std::string>* held_elsewhere) {
  // Global shapes: a tensor-parallel part is checked as the tensor it is part of.
  std::map<std::string, std::vector<int64_t>> expected, frozen;
  const TensorParallelLayout* tp = model.tensor_parallel();
  auto global_shapes = [&](const std::vector<std::unique_ptr<FlatParam>>& flats, auto& into) {
    for (const auto& unit : flats)
      for (size_t i = 0; i < unit->names.size(); ++i) {
        const Placement* p = tp ? tp->find(unit->names[i]) : nullptr;
        into[unit->names[i]] = p ? p->global_shape : unit->params[i].sizes().vec();
      }
  };
  global_shapes(model.flat_params(), expected);
  global_shapes(model.frozen_flat_params(), frozen);
  const bool base_left_out = manifest_leaves_out_base(reader.manifest());
  const std::string where = checkpoint_misfit(reader);
  std::vector<std::string> prefixes{"model."};
  if (optimizer) {
    check_optimizer_fits(reader, *optimizer);
    for (const OptimizerState& s : optimizer->state()) prefixes.push_back("optim." + s.name + ".");
  }
  for (const auto& [name, shape] : expected)
    for (const std::string& prefix : prefixes) require_float32_tensor(reader, prefix + name, shape);
  if (!base_left_out)
    for (const auto& [name, shape] : frozen) require_float32_tensor(reader, "model." + name, shape);  // no optimizer state
  require_only_model_tensors(reader, [&](const std::string& name) {
    return expected.count(name) || frozen.count(name) || (held_elsewhere && held_elsewhere->count(name));
  });
  for (const auto& [name, t] : model.unsharded_state()) {
    auto it = reader.manifest().tensors.find("buffer." + name);
    CADRE_CONFIG_CHECK(it != reader.manifest().tensors.end(), where, "it has no tensor 'buffer.", name, "'");
    CADRE_CONFIG_CHECK(it->second.shape == t.sizes().vec(), where, "tensor 'buffer.", name, "' is ",
                       shape_text(it->second.shape), " there and ", shape_text(t.sizes().vec()), " here");
  }
}

void load_model_state(const CheckpointReader& reader, FSDPModule& model) {
  const auto& layout = model.piece_layout();
  const auto& pieces = model.parameters();
  const TensorParallelLayout* tp = model.tensor_parallel();
  c10::NoGradGuard no_grad;
  for (size_t k = 0; k < layout.size(); ++k) {
    const ShardPiece& where = layout[k];
    read_into(reader, "model." + where.name, global_place(where, tp).part, where.start, pieces[k]);
  }
  const size_t frozen = manifest_leaves_out_base(reader.manifest()) ? 0 : model.frozen_piece_layout().size();
  for (size_t k = 0; k < frozen; ++k) {
    const ShardPiece& where = model.frozen_piece_layout()[k];
    read_into(reader, "model." + where.name, global_place(where, tp).part, where.start, model.frozen_parameters()[k]);
  }
  load_buffers(reader, model);
  model.mark_updated();
}

void load_buffers(const CheckpointReader& reader, FSDPModule& model) {
  c10::NoGradGuard no_grad;
  for (auto& [name, t] : model.unsharded_state()) {
    const TensorRecord& r = reader.tensor("buffer." + name);
    CADRE_CONFIG_CHECK(r.dtype == buffer_dtype(t, name) && r.shape == t.sizes().vec(), "checkpoint '", reader.dir(),
                       "': buffer '", name, "' is ", r.dtype, " ", shape_text(r.shape), " there and ",
                       buffer_dtype(t, name), " ", shape_text(t.sizes().vec()), " here");
    at::Tensor values = at::empty(t.sizes(), t.options().device(at::kCPU));
    reader.read("buffer." + name, 0, t.numel(), values.data_ptr());
    t.copy_(values);
  }
}

void load_train_state(const CheckpointReader& reader, FSDPModule& model, Optimizer& optimizer, int rank) {
  load_model_state(reader, model);
  {
    const auto& layout = model.piece_layout();
    const TensorParallelLayout* tp = model.tensor_parallel();
    const std::vector<OptimizerState> state = optimizer.state();
    c10::NoGradGuard no_grad;
    for (size_t k = 0; k < layout.size(); ++k) {
      const ShardPiece& where = layout[k];
      const Box part = global_place(where, tp).part;
      for (const OptimizerState& s : state)
        read_into(reader, "optim." + s.name + "." + where.name, part, where.start, (*s.tensors)[k]);
    }
  }
  const auto& state = reader.manifest().state;
  auto steps = state.find("optimizer_steps");
  CADRE_CHECK(steps != state.end(), "checkpoint '", reader.dir(), "' has no optimizer_steps in its state");
  optimizer.set_steps(steps->second);
  // The writer's rank r restores into rank r; a grown job reuses states of the old ranks.
  const int64_t old_world = reader.manifest().world_size;
  const std::string rng_name = str("rng.cpu.rank", rank % old_world);
  if (reader.has(rng_name)) {
    const TensorRecord& r = reader.tensor(rng_name);
    at::Tensor rng = at::empty({r.numel()}, at::kByte);
    reader.read(rng_name, 0, r.numel(), rng.data_ptr());
    auto gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng);
  }
}

StateFiller::StateFiller(FSDPModule& model, Optimizer& optimizer) : model_(model) {
  const auto& layout = model.piece_layout();
  const auto& pieces = model.parameters();
  const TensorParallelLayout* tp = model.tensor_parallel();
  const std::vector<OptimizerState> state = optimizer.state();
  for (size_t k = 0; k < layout.size(); ++k) {
    const ShardPiece& where = layout[k];
    const GlobalPlace place = global_place(where, tp);
    add_target("model." + where.name, place.shape, place.part, where.start, pieces[k]);
    for (const OptimizerState& s : state)
      add_target("optim." + s.name + "." + where.name, place.shape, place.part, where.start, (*s.tensors)[k]);
  }
  for (size_t k = 0; k < model.frozen_piece_layout().size(); ++k) {
    const ShardPiece& where = model.frozen_piece_layout()[k];
    const GlobalPlace place = global_place(where, tp);
    add_target("model." + where.name, place.shape, place.part, where.start, model.frozen_parameters()[k]);
  }
  for (const auto& [name, t] : model.unsharded_state()) {
    buffer_dtype(t, name);  // one the staging stores
    add_target("buffer." + name, t.sizes().vec(), box_whole(t.sizes().vec()), 0, t);
  }
}

void StateFiller::add_target(std::string name, const std::vector<int64_t>& shape, const Box& part, int64_t start,
                             const at::Tensor& into) {
  Target t;
  t.name = std::move(name);
  t.runs = box_runs(shape, part, start, into.numel());
  t.start = start;
  t.into = into;
  t.host = into.device().is_cpu() && into.is_contiguous() ? into : at::empty(into.sizes(), into.options().device(at::kCPU));
  by_name_[t.name] = targets_.size();
  targets_.push_back(std::move(t));
}

void StateFiller::apply(const std::vector<SnapshotPiece>& pieces, const char* base, const std::string& rng_name) {
  for (const SnapshotPiece& p : pieces) {
    if (p.tensor == rng_name) {
      at::Tensor rng = at::empty({p.box.numel()}, at::kByte);
      std::memcpy(rng.data_ptr(), base + p.offset, size_t(p.box.numel()));
      auto gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(rng);
      continue;
    }
    auto found = by_name_.find(p.tensor);
    if (found == by_name_.end()) continue;  // another rank's RNG, or a tensor of no part of ours
    Target& t = targets_[found->second];
    const size_t element = t.host.element_size();
    CADRE_CHECK(int64_t(element) == dtype_element_size(p.dtype), "in-memory state: '", p.tensor, "' is ", p.dtype,
                " but this rank's tensor has ", element, "-byte elements");
    char* into = static_cast<char*>(t.host.data_ptr());
    const char* from = base + p.offset;
    t.filled += runs_intersect(t.runs, box_runs(p.shape, p.box), [&](int64_t dst, int64_t src, int64_t n) {
      std::memcpy(into + size_t(dst - t.start) * element, from + size_t(src) * element, size_t(n) * element);
    });
  }
}

void StateFiller::finish(int rank) {
  c10::NoGradGuard no_grad;
  for (Target& t : targets_) {
    CADRE_CHECK(t.filled == t.into.numel(), "rank ", rank, ": the in-memory state held ", t.filled, " of the ",
                t.into.numel(), " elements of '", t.name, "' this rank needs");
    if (!t.host.is_same(t.into)) t.into.copy_(t.host);
  }
  model_.mark_updated();
}

}  // namespace cadre
