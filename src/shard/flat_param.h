// A flat parameter: one FSDP unit's parameters laid end to end in one buffer, padded so the
// shard group divides it evenly; the module's parameters become views of the buffer, and each
// rank keeps only its contiguous shard in float32 (the master). The full buffer's storage can
// be freed and re-materialised without touching the views: autograd's saved tensors and the
// module see the new bytes because they share the storage.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

namespace cadre {

struct FlatParam {
  std::string unit;                 // "layers.3", "root": for errors and reports
  std::vector<std::string> names;   // full parameter names, in buffer order
  std::vector<at::Tensor> params;   // the module's parameters (compute dtype), views of `full`
  std::vector<int64_t> offsets, numels;
  int64_t numel = 0;                // sum of numels
  int64_t padded = 0;               // numel rounded up to a multiple of the shard group size
  int64_t shard_numel = 0;          // padded / group size
  int64_t shard_offset = 0;         // this rank's shard starts here in the full buffer

  at::Tensor full;       // compute dtype [padded]; storage freed when the unit is resharded
  at::Tensor grad_full;  // float32 [padded]; the params' .grad are views of it
  at::Tensor master;     // float32 [shard_numel]: this rank's shard, what the optimizer updates
  at::Tensor grad_shard; // float32 [shard_numel]: reduced gradient of the shard
  std::vector<at::Tensor> grad_views;  // each parameter's view of grad_full: its .grad

  // Takes the parameters (initialised, equal on every rank), builds the buffers and makes the
  // parameters views of `full`. With one rank per group and float32 compute, `master` is `full`.
  FlatParam(std::string unit, std::vector<std::string> names, std::vector<at::Tensor> params, int group_size,
            int group_rank, at::ScalarType compute);

  bool full_allocated() const;
  void full_allocate();  // storage back to its size (contents undefined)
  void full_free();      // storage to zero bytes; views stay valid objects
  bool grad_allocated() const;
  void grad_allocate_zero();
  void grad_free();
  bool master_is_full() const { return master.is_same(full); }
  // Points each parameter's .grad back at its view of grad_full when something replaced it
  // (Module::zero_grad with set_to_none drops it; the next backward would then miss the buffer).
  void relink_grads();
  int64_t full_bytes() const;  // bytes of the full buffer when allocated
};

}  // namespace cadre
