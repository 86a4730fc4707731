// Deferred parameters and reading a rank's part of one from a ParamSource (deferred_param.h).
#include "shard/deferred_param.h"

#include <ATen/ATen.h>
#include <c10/core/StorageImpl.h>

#include <algorithm>
#include <vector>

#include "core/error.h"

namespace cadre {

at::Tensor deferred_empty(at::IntArrayRef sizes) {
  at::Tensor t = at::empty({0}, at::kFloat);
  t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);  // the storage stays at zero bytes
  return t;
}

bool has_no_storage(const at::Tensor& t) { return t.numel() > 0 && t.storage().nbytes() == 0; }

namespace {

// The global tensor's contiguous runs that elements [start, end) of the local part map to: the
// part is a box of the global tensor, whole along every dimension after the last one it splits
// (`split`), so each index of the dimensions up to `split` starts one run of `chunk` elements.
struct PartRuns {
  std::vector<int64_t> local, offsets, global_strides;
  int split = -1;     // the last dimension where the part is narrower than the tensor
  int64_t chunk = 0;  // elements of one run: local[split] * the sizes after it

  PartRuns(at::IntArrayRef local_shape, const Placement* where) : local(local_shape.vec()) {
    const size_t d = local.size();
    offsets.assign(d, 0);
    std::vector<int64_t> global = local;
    if (where && !where->replicated) {
      offsets = where->offsets;
      global = where->global_shape;
    }
    global_strides.assign(d, 1);
    for (size_t k = d; k-- > 1;) global_strides[k - 1] = global_strides[k] * global[k];
    for (size_t k = 0; k < d; ++k)
      if (local[k] != global[k]) split = int(k);
    chunk = 1;
    for (size_t k = std::max(split, 0); k < d; ++k) chunk *= local[k];
  }

  // The global index of local element f, and how many elements from there are contiguous.
  std::pair<int64_t, int64_t> run_at(int64_t f) const {
    if (split < 0) return {f, chunk - f};
    int64_t q = f / chunk, r = f % chunk, global = offsets[split] * global_strides[split] + r;
    for (int k = split; k-- > 0;) {
      global += (offsets[k] + q % local[k]) * global_strides[k];
      q /= local[k];
    }
    return {global, chunk - r};
  }
};

}  // namespace

void fill_from_source(const ParamSource& source, const std::string& name, at::IntArrayRef local_shape,
                      const Placement* where, int64_t start, at::Tensor out) {
  CADRE_CHECK(out.scalar_type() == at::kFloat && out.is_contiguous() && out.dim() == 1,
              "fill_from_source: '", name, "' needs a contiguous float32 vector");
  at::Tensor host = out.is_cpu() ? out : at::empty({out.numel()}, at::kFloat);
  float* dst = host.data_ptr<float>();
  const PartRuns runs(local_shape, where);
  for (int64_t f = start, end = start + out.numel(); f < end;) {
    const auto [global, contiguous] = runs.run_at(f);
    const int64_t n = std::min(contiguous, end - f);
    source.read(name, global, n, dst + (f - start));
    f += n;
  }
  if (!out.is_cpu()) out.copy_(host);
}

}  // namespace cadre
