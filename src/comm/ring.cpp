// Ring algorithms on Gloo unbound buffers: reduce-scatter (segmented so the reduction of one
// segment overlaps the arrival of the next), all-gather straight into the output, and broadcast.
#include "comm/ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"

namespace cadre::comm::ring {
namespace {

// Segments let the reduction of one piece run while the next piece is still on the wire.
constexpr size_t kSegmentBytes = size_t(4) << 20;

std::chrono::milliseconds remaining(Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

void wait_recv(gloo::transport::UnboundBuffer& buf, Deadline deadline) {
  CADRE_CHECK(buf.waitRecv(nullptr, remaining(deadline)), "receive aborted");
}
void wait_send(gloo::transport::UnboundBuffer& buf, Deadline deadline) {
  CADRE_CHECK(buf.waitSend(nullptr, remaining(deadline)), "send aborted");
}

// dst = a (op) b elementwise; dst may alias a or b.
template <typename T>
void combine_into(T* dst, const T* a, const T* b, size_t n, Combine combine) {
  if (combine == Combine::Sum) {
    for (size_t i = 0; i < n; ++i) dst[i] = a[i] + b[i];
  } else {
    for (size_t i = 0; i < n; ++i) dst[i] = a[i] < b[i] ? b[i] : a[i];
  }
}

void combine_bytes(void* dst, const void* a, const void* b, size_t bytes, Elem elem, Combine combine) {
  if (elem == Elem::F32)
    combine_into(static_cast<float*>(dst), static_cast<const float*>(a), static_cast<const float*>(b),
                 bytes / sizeof(float), combine);
  else
    combine_into(static_cast<int64_t*>(dst), static_cast<const int64_t*>(a), static_cast<const int64_t*>(b),
                 bytes / sizeof(int64_t), combine);
}

int mod(int a, int n) { return ((a % n) + n) % n; }

}  // namespace

char* Scratch::get(int which, size_t bytes) {
  if (capacity[which] < bytes) {
    buffers[which].reset(new char[bytes]);
    capacity[which] = bytes;
  }
  return buffers[which].get();
}

void all_gather(gloo::Context& ctx, uint64_t slot, const void* own, void* data, size_t block_bytes,
                Deadline deadline) {
  const int n = ctx.size, r = ctx.rank;
  char* base = static_cast<char*>(data);
  char* mine = base + r * block_bytes;
  if (block_bytes == 0) return;
  if (n == 1) {
    if (own != mine) std::memcpy(mine, own, block_bytes);
    return;
  }
  auto buf = ctx.createUnboundBuffer(data, block_bytes * n);
  auto own_buf = own != mine ? ctx.createUnboundBuffer(const_cast<void*>(own), block_bytes) : nullptr;
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  // Step s forwards block r-s (its own at step 0) and receives block r-s-1.
  for (int step = 0; step < n - 1; ++step) {
    const int send_block = mod(r - step, n), recv_block = mod(r - step - 1, n);
    gloo::transport::UnboundBuffer& from = step == 0 && own_buf ? *own_buf : *buf;
    buf->recv(prev, slot, recv_block * block_bytes, block_bytes);
    from.send(next, slot, step == 0 && own_buf ? 0 : send_block * block_bytes, block_bytes);
    if (step == 0 && own_buf) std::memcpy(mine, own, block_bytes);
    wait_recv(*buf, deadline);
    wait_send(from, deadline);
  }
}

void reduce_scatter(gloo::Context& ctx, uint64_t slot, const void* input, void* output, size_t block_elems,
                    Elem elem, Combine combine, Deadline deadline, Scratch& scratch_cache) {
  const int n = ctx.size, r = ctx.rank;
  const size_t elem_bytes = elem == Elem::F32 ? sizeof(float) : sizeof(int64_t);
  const size_t block_bytes = block_elems * elem_bytes;
  const char* in = static_cast<const char*>(input);
  if (block_bytes == 0) return;
  if (n == 1) {
    if (output != input) std::memcpy(output, input, block_bytes);
    return;
  }
  const size_t segment = std::max(elem_bytes, kSegmentBytes / elem_bytes * elem_bytes);
  // Two scratch blocks alternate: one is on the wire holding partial sums while the other
  // receives the predecessor's partial sums and folds this rank's contribution into them.
  char* scratch[2] = {scratch_cache.get(0, block_bytes), n > 2 ? scratch_cache.get(1, block_bytes) : nullptr};
  std::unique_ptr<gloo::transport::UnboundBuffer> scratch_buf[2] = {
      ctx.createUnboundBuffer(scratch[0], block_bytes),
      n > 2 ? ctx.createUnboundBuffer(scratch[1], block_bytes) : nullptr};
  auto input_buf = ctx.createUnboundBuffer(const_cast<char*>(in), block_bytes * n);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  // Step s sends the partial sums of block r-s-1 (s+1 contributions) and receives those of
  // block r-s-2; after n-1 steps the received block is r and holds every contribution.
  int current = 1;  // scratch holding the partial sums to send at this step (step > 0)
  for (int step = 0; step < n - 1; ++step) {
    const bool last = step == n - 2;
    const int receiving = 1 - current;
    const size_t recv_in_off = mod(r - step - 2, n) * block_bytes;
    gloo::transport::UnboundBuffer& to = *scratch_buf[receiving];
    gloo::transport::UnboundBuffer& from = step == 0 ? *input_buf : *scratch_buf[current];
    const size_t send_off = step == 0 ? mod(r - 1, n) * block_bytes : 0;
    size_t segments = 0;
    for (size_t off = 0; off < block_bytes; off += segment, ++segments)
      to.recv(prev, slot, off, std::min(segment, block_bytes - off));
    for (size_t off = 0; off < block_bytes; off += segment)
      from.send(next, slot, send_off + off, std::min(segment, block_bytes - off));
    // Receives from one peer on one slot complete in the order they were posted.
    char* folded = last ? static_cast<char*>(output) : scratch[receiving];
    for (size_t off = 0; off < block_bytes; off += segment) {
      wait_recv(to, deadline);
      combine_bytes(folded + off, scratch[receiving] + off, in + recv_in_off + off,
                    std::min(segment, block_bytes - off), elem, combine);
    }
    for (size_t i = 0; i < segments; ++i) wait_send(from, deadline);
    current = receiving;
  }
}

void broadcast(gloo::Context& ctx, uint64_t slot, void* data, size_t nbytes, int root, Deadline deadline) {
  const int n = ctx.size;
  if (n == 1 || nbytes == 0) return;
  auto buf = ctx.createUnboundBuffer(data, nbytes);
  if (ctx.rank == root) {
    for (int peer = 0; peer < n; ++peer)
      if (peer != root) buf->send(peer, slot, 0, nbytes);
    for (int peer = 0; peer < n - 1; ++peer) wait_send(*buf, deadline);
  } else {
    buf->recv(root, slot, 0, nbytes);
    wait_recv(*buf, deadline);
  }
}

}  // namespace cadre::comm::ring
