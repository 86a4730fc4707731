// Copies of device tensors (CUDA shards, moments, buffers) into host memory for a checkpoint,
// finished on the writer's thread: staging starts the copies and returns; the background
// writer waits for them (Snapshot::finish) before it reads the bytes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "ckpt/snapshot.h"

namespace cadre {

class HostStaging {
 public:
  HostStaging() = default;
  // Waits for copies still in flight before freeing their buffer (a save staged but never
  // written: the next stage() clears the snapshot).
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;

  // Queues `t`'s elements (contiguous, on any device) for the snapshot pieces `pieces` (indexes
  // into Snapshot::pieces(), filled one after another in row-major order). `t` is kept
  // alive until finish().
  void add(at::Tensor t, std::vector<size_t> pieces);
  // Allocates one host buffer for everything queued (page-locked when a tensor is on a CUDA
  // device, so the copies run without the host), starts every copy and records their
  // completion on each device's current stream. CPU tensors are copied here and now.
  void start();
  // Waits for the copies, writes their bytes into the snapshot's pieces and frees the buffer.
  void finish(Snapshot& snapshot);
  size_t queued() const { return items_.size(); }
  // The host buffer's size while it is held, 0 before start() and after finish().
  size_t bytes_held() const { return buffer_ ? size_ : 0; }

 private:
  struct Item {
    at::Tensor source;
    std::vector<size_t> pieces;
    size_t offset = 0;
  };
  void wait_for_copies();

  std::vector<Item> items_;
  std::unique_ptr<char, void (*)(char*)> buffer_{nullptr, nullptr};
  size_t size_ = 0;
  std::vector<std::function<void()>> waits_;  // one per device with copies in flight
};

}  // namespace cadre
