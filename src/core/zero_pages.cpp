// Zero vectors from fresh anonymous mappings (see zero_pages.h).
#include "core/zero_pages.h"

#include <ATen/ATen.h>

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace cadre {

at::Tensor zeros_on_first_touch(int64_t numel, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  if (!options.device().is_cpu() || bytes < (size_t(1) << 20)) return at::zeros({numel}, options);
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  CADRE_CHECK(p != MAP_FAILED, "cannot map ", bytes, " zero bytes: ", std::strerror(errno));
  // Advice only: without transparent huge pages the mapping works in 4 KiB pages.
  if (bytes >= (size_t(2) << 20)) (void)::madvise(p, bytes, MADV_HUGEPAGE);
  return at::from_blob(p, {numel}, [bytes](void* q) { ::munmap(q, bytes); }, options);
}

}  // namespace cadre
