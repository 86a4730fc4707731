// A flat parameter: one FSDP unit's parameters laid end to end in one buffer, padded so the
// shard group divides it evenly; the module's parameters become views of the buffer, and each
// rank keeps only its contiguous shard in float32 (the master). The full buffer's storage can
// be freed and re-materialised without touching the views: autograd's saved tensors and the
// module see the new bytes because they share the storage. ZeRO-1 keeps the full buffer and
// a full gradient in the compute dtype instead; its shard is a view of its own block of them.
#pragma once

#include <ATen/core/Tensor.h>

#include <c10/core/Device.h>
#include <c10/core/TensorOptions.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cadre {

// Writes elements [start, start + out.numel()) of parameter `param`'s values (flattened,
// float32) into `out`: how a flat parameter is filled when its parameters have no storage yet
// (shard/deferred_param.h).
using ParamValues = std::function<void(size_t param, int64_t start, at::Tensor out)>;

struct FlatParam {
  std::string unit;                 // "layers.3", "root": for errors and reports
  std::vector<std::string> names;   // full parameter names, in buffer order
  std::vector<at::Tensor> params;   // the module's parameters (compute dtype), views of `full`
  std::vector<int64_t> offsets, numels;
  int64_t numel = 0;                // sum of numels
  int64_t padded = 0;               // numel rounded up to a multiple of the shard group size
  int64_t shard_numel = 0;          // padded / group size
  int64_t shard_offset = 0;         // this rank's shard starts here in the full buffer

  bool trainable = true;  // false: frozen parameters (no gradient buffers at all: grad_full, grad_shard undefined)
  at::Tensor full;       // compute dtype [padded]; storage freed when the unit is resharded
  at::Tensor grad_full;  // [padded]; the params' .grad are views of it; float32 or the compute dtype (below)
  // Micro-batches' gradients kept under no_sync while grad_full is in the compute dtype and not
  // ZeRO-1's: float32 [padded], accumulated at the end of each backward that does not reduce,
  // so accumulation rounds as it would in a float32 grad_full. Undefined when there are none.
  at::Tensor grad_carry;
  bool carries_grads = false;  // grad_full is in a narrower dtype than float32 (not ZeRO-1's)
  // float32 [shard_numel]: this rank's shard, what the optimizer updates (a frozen one's may be
  // in the compute dtype: master_in_compute below)
  at::Tensor master;
  at::Tensor grad_shard; // [shard_numel]: reduced gradient of the shard (ZeRO-1: a view of grad_full)
  std::vector<at::Tensor> grad_views;  // each parameter's view of grad_full: its .grad

  // Takes the parameters (initialised, equal on every rank), builds the buffers and makes the
  // parameters views of `full`. With one rank per group and float32 compute, `master` is `full`.
  // Deferred parameters (no storage) take their values from `values` instead, on `device`: a
  // sharding rank then fills only its own shard, never the whole buffer.
  // `replicated` (ZeRO-1): full and grad_full stay whole; with float32 compute the master is
  // the own block of `full` itself. grad_full holds the compute dtype when `replicated` or
  // `compute_dtype_grads` (the gradients autograd produces, unconverted), float32 otherwise.
  // Frozen parameters (requires_grad off; `trainable` false) get the same master, full buffer
  // and views, and no gradient buffers: grad_full and grad_shard stay undefined.
  // `master_in_compute` (frozen only): the master is kept in the compute dtype, a view of the
  // full buffer where that holds this rank's values anyway (one rank per group, ZeRO-1).
  FlatParam(std::string unit, std::vector<std::string> names, std::vector<at::Tensor> params, int group_size,
            int group_rank, at::ScalarType compute, bool replicated = false, bool compute_dtype_grads = false,
            const ParamValues& values = {}, std::optional<c10::Device> device = std::nullopt, bool trainable = true,
            bool master_in_compute = false);

  bool full_allocated() const;
  void full_allocate();  // storage back to its size (contents undefined)
  void full_free();      // storage to zero bytes; views stay valid objects
  bool grad_allocated() const;
  void grad_allocate_zero();
  void grad_free();       // also drops grad_carry
  // End of a backward that does not reduce (no_sync): a compute-dtype grad_full's gradients
  // move into grad_carry (float32) and grad_full starts again from zero.
  void carry_grads();
  // The gradients to reduce: grad_full, or grad_carry with grad_full added into it (float32;
  // the carry then holds the total, so a second call would count grad_full twice).
  at::Tensor fold_carry_for_reduction();
  bool master_is_full() const { return master.is_same(full); }
  // The master (gradient shard) lives inside the full buffer (gradient): ZeRO-1's own block.
  bool master_in_full() const { return master.storage().is_alias_of(full.storage()); }
  bool grad_shard_in_full() const {
    return trainable && grad_shard.storage().is_alias_of(grad_full.storage());
  }
  // Points each parameter's .grad back at its view of grad_full when something replaced it
  // (Module::zero_grad with set_to_none drops it; the next backward would then miss the buffer).
  void relink_grads();
  // Parameter i's elements inside this rank's shard, as [lo, hi) of the full buffer (empty when
  // lo >= hi): what the optimizer updates and a checkpoint writes of it.
  std::pair<int64_t, int64_t> shard_range(size_t i) const;
  int64_t full_bytes() const;  // bytes of the full buffer when allocated
  int64_t grad_bytes() const;  // bytes of the full gradient when allocated

 private:
  void make_grad_buffers(int group_size, bool replicated, bool compute_dtype_grads, at::ScalarType compute,
                         const at::TensorOptions& on_device);
  void fill_values(int64_t lo, at::Tensor& out, const ParamValues& values_of) const;
};

}  // namespace cadre
