// Flat parameter buffers and their storage lifecycle.
#include "shard/flat_param.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>

#include "core/error.h"

namespace cadre {
namespace {

bool storage_allocated(const at::Tensor& t) { return t.storage().nbytes() > 0; }

// Frees or re-materialises a storage on whatever device it lives, through the storage's own
// allocator (CPU's, or CUDA's caching allocator under a guard for the storage's device). The
// contents are not kept: a full buffer is always regathered and a gradient zeroed after this.
// On CUDA a freed block may be reused at once by work on the current stream; the collectives
// that read or write these buffers are ordered before that work (comm/nccl_group.cpp), so
// the caching allocator never hands out memory a collective still uses.
void storage_resize(const at::Tensor& t, int64_t bytes) {
  c10::StorageImpl* storage = t.storage().unsafeGetStorageImpl();
  if (bytes == 0) {
    storage->set_data_ptr_noswap(c10::DataPtr(nullptr, storage->device()));
    storage->set_nbytes(0);
    return;
  }
  c10::OptionalDeviceGuard guard(storage->device());
  storage->set_data_ptr_noswap(storage->allocator()->allocate(static_cast<size_t>(bytes)));
  storage->set_nbytes(static_cast<size_t>(bytes));
}

}  // namespace

FlatParam::FlatParam(std::string unit_name, std::vector<std::string> param_names, std::vector<at::Tensor> ps,
                     int group_size, int group_rank, at::ScalarType compute, bool replicated,
                     bool compute_dtype_grads)
    : unit(std::move(unit_name)), names(std::move(param_names)), params(std::move(ps)) {
  c10::NoGradGuard no_grad;
  CADRE_CHECK(!params.empty(), "FSDP unit ", unit, " has no parameters");
  for (auto& p : params) {
    offsets.push_back(numel);
    numels.push_back(p.numel());
    numel += p.numel();
  }
  padded = (numel + group_size - 1) / group_size * group_size;
  shard_numel = padded / group_size;
  shard_offset = shard_numel * group_rank;

  // The full float32 values first (padding zero), then this rank's shard of them.
  // On the parameters' device (the model was moved there before it was sharded).
  const at::TensorOptions on_device = at::TensorOptions().device(params.front().device());
  at::Tensor values = at::zeros({padded}, on_device.dtype(at::kFloat));
  for (size_t i = 0; i < params.size(); ++i)
    values.narrow(0, offsets[i], numels[i]).copy_(params[i].reshape({-1}));
  if (group_size == 1 && compute == at::kFloat) {
    full = values;
    master = full;
  } else if (replicated && compute == at::kFloat) {
    full = values;
    master = full.narrow(0, shard_offset, shard_numel);  // the optimizer updates it in place
  } else {
    master = values.narrow(0, shard_offset, shard_numel).clone();
    full = values.to(compute);  // a fresh, resizable storage
  }
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_data(full.narrow(0, offsets[i], numels[i]).view(params[i].sizes()));

  grad_full = at::zeros({padded}, on_device.dtype(replicated || compute_dtype_grads ? compute : at::kFloat));
  carries_grads = compute_dtype_grads && !replicated && compute != at::kFloat;
  // Autograd accumulates into a gradient that already exists in place, so these views stay
  // the gradients' storage for the whole run.
  for (size_t i = 0; i < params.size(); ++i) {
    grad_views.push_back(grad_full.narrow(0, offsets[i], numels[i]).view(params[i].sizes()));
    params[i].mutable_grad() = grad_views.back();
  }
  if (group_size == 1) grad_shard = grad_full;
  else if (replicated) grad_shard = grad_full.narrow(0, shard_offset, shard_numel);  // reduce-scattered in place
  else grad_shard = at::zeros({shard_numel}, on_device.dtype(at::kFloat));
}

bool FlatParam::full_allocated() const { return storage_allocated(full); }
void FlatParam::full_allocate() {
  if (!full_allocated()) storage_resize(full, full_bytes());
}
void FlatParam::full_free() {
  CADRE_CHECK(!master_is_full() && !master_in_full(), "FSDP unit ", unit, ": cannot free a full buffer that holds the master");
  storage_resize(full, 0);
}
int64_t FlatParam::full_bytes() const { return padded * static_cast<int64_t>(full.element_size()); }
int64_t FlatParam::grad_bytes() const { return padded * static_cast<int64_t>(grad_full.element_size()); }

void FlatParam::relink_grads() {
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].grad().defined() || !params[i].grad().is_same(grad_views[i])) params[i].mutable_grad() = grad_views[i];
}

bool FlatParam::grad_allocated() const { return storage_allocated(grad_full); }
void FlatParam::grad_allocate_zero() {
  if (grad_allocated()) return;
  storage_resize(grad_full, grad_bytes());
  grad_full.zero_();
}
void FlatParam::grad_free() {
  CADRE_CHECK(!grad_shard.is_same(grad_full) && !grad_shard_in_full(), "FSDP unit ", unit,
              ": cannot free a gradient that holds the shard's");
  storage_resize(grad_full, 0);
  grad_carry = at::Tensor();
}

void FlatParam::carry_grads() {
  if (!carries_grads) return;  // grad_full accumulates in float32 itself (ZeRO-1: in its compute dtype, by design)
  if (!grad_carry.defined()) grad_carry = at::zeros({padded}, grad_full.options().dtype(at::kFloat));
  grad_carry.add_(grad_full);
  grad_full.zero_();
}

at::Tensor FlatParam::fold_carry_for_reduction() {
  if (!grad_carry.defined()) return grad_full;
  return grad_carry.add_(grad_full);
}

}  // namespace cadre
