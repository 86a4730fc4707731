// Flat parameter buffers and their storage lifecycle.
#include "shard/flat_param.h"

#include <ATen/ATen.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/GradMode.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>

#include "core/error.h"
#include "core/zero_pages.h"
#include "shard/deferred_param.h"

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
                     bool compute_dtype_grads, const ParamValues& values_of, std::optional<c10::Device> device,
                     bool trainable_params, bool master_in_compute)
    : unit(std::move(unit_name)), names(std::move(param_names)), params(std::move(ps)), trainable(trainable_params) {
  c10::NoGradGuard no_grad;
  CADRE_CHECK(!params.empty(), "FSDP unit ", unit, " has no parameters");
  CADRE_CHECK(!(master_in_compute && trainable), "FSDP unit ", unit,
              ": only frozen parameters keep their master in the compute dtype");
  for (auto& p : params) {
    offsets.push_back(numel);
    numels.push_back(p.numel());
    numel += p.numel();
  }
  padded = (numel + group_size - 1) / group_size * group_size;
  shard_numel = padded / group_size;
  shard_offset = shard_numel * group_rank;

  // The float32 values this rank keeps (padding zero): its shard when the strategy shards, the
  // whole buffer otherwise. On the parameters' device (the model was moved there before it was
  // sharded), or `device` for deferred parameters.
  const at::TensorOptions on_device = at::TensorOptions().device(device.value_or(params.front().device()));
  const bool shard_only = group_size > 1 && !replicated;
  const int64_t lo = shard_only ? shard_offset : 0;
  at::Tensor values = at::zeros({shard_only ? shard_numel : padded}, on_device.dtype(at::kFloat));
  fill_values(lo, values, values_of);
  if (master_in_compute) values = values.to(compute);
  const bool values_in_compute = values.scalar_type() == compute;
  if (group_size == 1 && values_in_compute) {
    full = values;
    master = full;
  } else if (replicated && values_in_compute) {
    full = values;
    master = full.narrow(0, shard_offset, shard_numel);  // the optimizer updates it in place
  } else if (shard_only) {
    master = values;
    full = at::empty({padded}, on_device.dtype(compute));  // resharded at rest: filled by the first gather
  } else {
    master = values.narrow(0, shard_offset, shard_numel).clone();
    full = values.to(compute);  // a fresh, resizable storage
  }
  for (size_t i = 0; i < params.size(); ++i)
    params[i].set_data(full.narrow(0, offsets[i], numels[i]).view(params[i].sizes()));
  if (trainable) make_grad_buffers(group_size, replicated, compute_dtype_grads, compute, on_device);
}

void FlatParam::make_grad_buffers(int group_size, bool replicated, bool compute_dtype_grads, at::ScalarType compute,
                                  const at::TensorOptions& on_device) {
  const bool shard_only = group_size > 1 && !replicated;
  // Sharded, the whole gradient is freed as soon as the tree is set up (fsdp_layout.cpp) and
  // zeroed when a backward allocates it again: never touched here.
  const at::TensorOptions grad_options = on_device.dtype(replicated || compute_dtype_grads ? compute : at::kFloat);
  grad_full = shard_only ? at::empty({padded}, grad_options) : at::zeros({padded}, grad_options);
  carries_grads = compute_dtype_grads && !replicated && compute != at::kFloat;
  // Autograd accumulates into a gradient that already exists in place, so these views stay
  // the gradients' storage for the whole run.
  for (size_t i = 0; i < params.size(); ++i) {
    grad_views.push_back(grad_full.narrow(0, offsets[i], numels[i]).view(params[i].sizes()));
    params[i].mutable_grad() = grad_views.back();
  }
  if (group_size == 1) grad_shard = grad_full;
  else if (replicated) grad_shard = grad_full.narrow(0, shard_offset, shard_numel);  // reduce-scattered in place
  else grad_shard = zeros_on_first_touch(shard_numel, on_device.dtype(at::kFloat));
}

// Elements [lo, lo + out.numel()) of the buffer: each parameter's overlap, from the parameter
// itself or, when it has no storage yet, from `values_of`.
void FlatParam::fill_values(int64_t lo, at::Tensor& out, const ParamValues& values_of) const {
  const int64_t hi = lo + out.numel();
  for (size_t i = 0; i < params.size(); ++i) {
    const int64_t begin = std::max(lo, offsets[i]), end = std::min(hi, offsets[i] + numels[i]);
    if (begin >= end) continue;
    at::Tensor dst = out.narrow(0, begin - lo, end - begin);
    if (!has_no_storage(params[i])) {
      dst.copy_(params[i].reshape({-1}).narrow(0, begin - offsets[i], end - begin));
      continue;
    }
    CADRE_CHECK(values_of, "FSDP unit ", unit, ": parameter '", names[i],
                "' has no storage and no source of values was given (FullyShardOptions::param_source)");
    values_of(i, begin - offsets[i], dst);
  }
}

bool FlatParam::full_allocated() const { return storage_allocated(full); }
void FlatParam::full_allocate() {
  if (!full_allocated()) storage_resize(full, full_bytes());
}
void FlatParam::full_free() {
  CADRE_CHECK(!master_is_full() && !master_in_full(), "FSDP unit ", unit, ": cannot free a full buffer that holds the master");
  storage_resize(full, 0);
}
std::pair<int64_t, int64_t> FlatParam::shard_range(size_t i) const {
  return {std::max(offsets[i], shard_offset), std::min(offsets[i] + numels[i], shard_offset + shard_numel)};
}
int64_t FlatParam::full_bytes() const { return padded * static_cast<int64_t>(full.element_size()); }
int64_t FlatParam::grad_bytes() const { return padded * static_cast<int64_t>(grad_full.element_size()); }

void FlatParam::relink_grads() {
  for (size_t i = 0; i < params.size(); ++i)
    if (!params[i].grad().defined() || !params[i].grad().is_same(grad_views[i])) params[i].mutable_grad() = grad_views[i];
}

bool FlatParam::grad_allocated() const { return trainable && storage_allocated(grad_full); }
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
