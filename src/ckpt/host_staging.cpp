// Host staging of device tensors for checkpoints (see host_staging.h). The CUDA calls are
// compiled only with CADRE_CUDA; without it every tensor is a CPU one in practice.
#include "ckpt/host_staging.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/error.h"
#include "core/log.h"

#ifdef CADRE_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace cadre {
namespace {

using HostBuffer = std::unique_ptr<char, void (*)(char*)>;

void free_pageable(char* p) { std::free(p); }

#ifdef CADRE_CUDA
void free_page_locked(char* p) {
  const cudaError_t e = cudaFreeHost(p);
  if (e != cudaSuccess) log::warn(str("checkpoint: cudaFreeHost of the staging buffer: ", cudaGetErrorString(e)));
}
#endif

// Page-locked memory is resident for as long as it is held, so it is allocated per save and
// freed once the writer has copied it out, never kept for the next save (libtorch's caching
// host allocator would keep it): a training process must not hold a checkpoint-sized copy
// between saves. A large malloc is an mmap, so the pageable buffer goes back the same way.
HostBuffer host_buffer(size_t bytes, bool page_locked) {
#ifdef CADRE_CUDA
  if (page_locked) {
    void* p = nullptr;
    const cudaError_t e = cudaHostAlloc(&p, std::max<size_t>(bytes, 1), cudaHostAllocDefault);
    CADRE_CHECK(e == cudaSuccess, "checkpoint: could not allocate ", bytes >> 20,
                " MiB of page-locked host memory to stage the device's tensors: ", cudaGetErrorString(e));
    return {static_cast<char*>(p), free_page_locked};
  }
#endif
  (void)page_locked;
  char* p = static_cast<char*>(std::malloc(std::max<size_t>(bytes, 1)));
  CADRE_CHECK(p != nullptr, "checkpoint: could not allocate ", bytes >> 20, " MiB of host memory for staging");
  return {p, free_pageable};
}

// Starts copying `t` into `dst`: on a CUDA device's current stream without waiting, from the
// CPU at once, from any other device waiting here.
void start_copy(const at::Tensor& t, char* dst) {
  const size_t n = t.nbytes();
  if (t.device().is_cpu()) {
    std::memcpy(dst, t.data_ptr(), n);
    return;
  }
#ifdef CADRE_CUDA
  if (t.device().is_cuda()) {
    c10::cuda::CUDAGuard guard(t.device());
    const cudaError_t e = cudaMemcpyAsync(dst, t.data_ptr(), n, cudaMemcpyDeviceToHost,
                                          c10::cuda::getCurrentCUDAStream(t.device().index()).stream());
    CADRE_CHECK(e == cudaSuccess, "checkpoint: copying ", n, " bytes from ", t.device(), " to the staging buffer: ",
                cudaGetErrorString(e));
    return;
  }
#endif
  at::from_blob(dst, t.sizes(), t.options().device(at::kCPU)).copy_(t);
}

// A wait for everything queued so far on `device`'s current stream (a CUDA device).
std::function<void()> record_completion(const at::Device& device) {
#ifdef CADRE_CUDA
  auto event = std::make_shared<at::cuda::CUDAEvent>();
  event->record(c10::cuda::getCurrentCUDAStream(device.index()));
  return [event] { event->synchronize(); };
#else
  (void)device;
  return {};
#endif
}

}  // namespace

HostStaging::~HostStaging() {
  try {
    wait_for_copies();
  } catch (const std::exception& e) {
    log::error(str("checkpoint: waiting for the staging copies: ", e.what()));
  }
}

void HostStaging::add(at::Tensor t, std::vector<size_t> pieces) {
  CADRE_CHECK(!buffer_, "HostStaging::add after start()");
  CADRE_CHECK(t.is_contiguous(), "HostStaging: a non-contiguous tensor on ", t.device());
  items_.push_back({std::move(t), std::move(pieces), 0});
}

void HostStaging::start() {
  CADRE_CHECK(!buffer_, "HostStaging::start() twice");
  size_ = 0;
  bool page_locked = false;
  for (Item& item : items_) {
    item.offset = (size_ + 63) / 64 * 64;
    size_ = item.offset + item.source.nbytes();
    page_locked = page_locked || item.source.device().is_cuda();
  }
  buffer_ = host_buffer(size_, page_locked);
  std::vector<at::Device> devices;
  try {
    for (const Item& item : items_) {
      const at::Device d = item.source.device();
      if (d.is_cuda() && std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
      start_copy(item.source, buffer_.get() + item.offset);
    }
  } catch (...) {
    // The copies already started must finish before the buffer is freed.
    for (const at::Device& d : devices) waits_.push_back(record_completion(d));
    throw;
  }
  for (const at::Device& d : devices) waits_.push_back(record_completion(d));
}

void HostStaging::wait_for_copies() {
  for (const auto& wait : waits_)
    if (wait) wait();
  waits_.clear();
}

void HostStaging::finish(Snapshot& snapshot) {
  CADRE_CHECK(buffer_ || items_.empty(), "HostStaging::finish() without start()");
  wait_for_copies();
  for (const Item& item : items_) {
    const char* from = buffer_.get() + item.offset;
    const char* end = from + item.source.nbytes();
    for (size_t k : item.pieces) {
      const SnapshotPiece& piece = snapshot.pieces().at(k);
      const size_t n = snapshot_piece_bytes(piece);
      CADRE_CHECK(from + n <= end, "checkpoint: '", piece.tensor, "' stages more bytes than its tensor holds");
      std::memcpy(snapshot.data(piece), from, n);
      from += n;
    }
    CADRE_CHECK(from == end, "checkpoint: the pieces staged from a ", item.source.device(), " tensor leave ",
                end - from, " of its bytes out");
  }
  items_.clear();
  buffer_.reset();
}

}  // namespace cadre
