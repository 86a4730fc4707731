// Ring algorithms on Gloo unbound buffers: reduce-scatter (segmented so the reduction of one
// segment overlaps the arrival of the next), all-gather straight into the output, and broadcast.
#include "comm/ring.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define CADRE_HAVE_F16C_PATH 1
#endif

#include <algorithm>
#include <type_traits>
#include <cstring>
#include <memory>
#include <vector>

#include "comm/interrupt.h"
#include "core/error.h"

namespace cadre::comm::ring {
namespace {

// Segments let the reduction of one piece run while the next piece is still on the wire.
constexpr size_t kSegmentBytes = size_t(4) << 20;
// A reduce-scatter goes round the ring this many segments at a time (16 MiB of float32).
constexpr size_t kSegmentsPerWindow = 4;

// Accumulation type: float for every float dtype, int64 for int64.
template <typename E> struct Accumulate { using type = float; };
template <> struct Accumulate<int64_t> { using type = int64_t; };

// dst[i] = combine(incoming[i], own[i]) in the accumulation type, stored as DstAcc ? A : E.
// `incoming` is InAcc ? A : E. dst may alias incoming (same type) or own (same type).
template <typename E, bool InAcc, bool DstAcc, bool Max>
void fold_typed(void* dst, const void* incoming, const E* own, size_t count, float divide_by) {
  using A = typename Accumulate<E>::type;
  using In = std::conditional_t<InAcc, A, E>;
  using Dst = std::conditional_t<DstAcc, A, E>;
  const In* x = static_cast<const In*>(incoming);
  Dst* d = static_cast<Dst*>(dst);
  for (size_t i = 0; i < count; ++i) {
    A a = static_cast<A>(x[i]), b = static_cast<A>(own[i]);
    A r = Max ? (a < b ? b : a) : a + b;
    if constexpr (!std::is_integral_v<A>)
      if (divide_by != 1.0f) r = r / divide_by;  // only the final fold divides (avg), then rounds once
    d[i] = static_cast<Dst>(r);
  }
}

template <typename E>
void fold(void* dst, bool dst_acc, const void* incoming, bool in_acc, const void* own, size_t count, Combine combine,
          float divide_by) {
  const E* o = static_cast<const E*>(own);
  const bool mx = combine == Combine::Max;
  if (in_acc && dst_acc) mx ? fold_typed<E, true, true, true>(dst, incoming, o, count, divide_by)
                            : fold_typed<E, true, true, false>(dst, incoming, o, count, divide_by);
  else if (in_acc) mx ? fold_typed<E, true, false, true>(dst, incoming, o, count, divide_by)
                      : fold_typed<E, true, false, false>(dst, incoming, o, count, divide_by);
  else if (dst_acc) mx ? fold_typed<E, false, true, true>(dst, incoming, o, count, divide_by)
                       : fold_typed<E, false, true, false>(dst, incoming, o, count, divide_by);
  else mx ? fold_typed<E, false, false, true>(dst, incoming, o, count, divide_by)
          : fold_typed<E, false, false, false>(dst, incoming, o, count, divide_by);
}

#ifdef CADRE_HAVE_F16C_PATH
// float16 through the CPU's F16C conversions (scalar c10::Half conversions cost ~10 ns per
// element): convert a chunk to float32, fold it as float32, convert back when storing narrow.
__attribute__((target("avx,f16c"))) void half_to_float(float* out, const c10::Half* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  for (; i < count; ++i) out[i] = static_cast<float>(in[i]);
}

__attribute__((target("avx,f16c"))) void float_to_half(c10::Half* out, const float* in, size_t count) {
  size_t i = 0;
  for (; i + 8 <= count; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT));
  for (; i < count; ++i) out[i] = c10::Half(in[i]);
}

void fold_half_f16c(void* dst, bool dst_acc, const void* incoming, bool in_acc, const void* own, size_t count,
                    Combine combine, float divide_by) {
  constexpr size_t kChunk = 2048;
  float in_f[kChunk], own_f[kChunk], out_f[kChunk];
  for (size_t at = 0; at < count; at += kChunk) {
    const size_t m = std::min(kChunk, count - at);
    const float* x = in_acc ? static_cast<const float*>(incoming) + at : in_f;
    if (!in_acc) half_to_float(in_f, static_cast<const c10::Half*>(incoming) + at, m);
    half_to_float(own_f, static_cast<const c10::Half*>(own) + at, m);
    float* d = dst_acc ? static_cast<float*>(dst) + at : out_f;
    fold<float>(d, true, x, true, own_f, m, combine, divide_by);
    if (!dst_acc) float_to_half(static_cast<c10::Half*>(dst) + at, out_f, m);
  }
}

#endif

void fold_elem(Elem elem, void* dst, bool dst_acc, const void* incoming, bool in_acc, const void* own, size_t count,
               Combine combine, float divide_by) {
  switch (elem) {
    case Elem::F32: return fold<float>(dst, dst_acc, incoming, in_acc, own, count, combine, divide_by);
    case Elem::I64: return fold<int64_t>(dst, dst_acc, incoming, in_acc, own, count, combine, divide_by);
    case Elem::BF16: return fold<c10::BFloat16>(dst, dst_acc, incoming, in_acc, own, count, combine, divide_by);
    case Elem::F16:
#ifdef CADRE_HAVE_F16C_PATH
      if (__builtin_cpu_supports("f16c"))
        return fold_half_f16c(dst, dst_acc, incoming, in_acc, own, count, combine, divide_by);
#endif
      return fold<c10::Half>(dst, dst_acc, incoming, in_acc, own, count, combine, divide_by);
  }
}

size_t elem_bytes(Elem e) { return e == Elem::I64 ? 8 : e == Elem::F32 ? 4 : 2; }
size_t acc_bytes(Elem e) { return e == Elem::I64 ? 8 : 4; }

int mod(int a, int n) { return ((a % n) + n) % n; }

// out[0..count) = in[0..count) in the accumulation type (a one-rank widening reduce-scatter).
void widen_elems(Elem elem, const void* in, void* out, size_t count) {
  auto widen = [&](auto tag) {
    using E = decltype(tag);
    const E* x = static_cast<const E*>(in);
    float* y = static_cast<float*>(out);
    for (size_t i = 0; i < count; ++i) y[i] = static_cast<float>(x[i]);
  };
  if (elem == Elem::BF16) widen(c10::BFloat16());
  else if (elem == Elem::F16) widen(c10::Half());
  else std::memcpy(out, in, count * elem_bytes(elem));  // float32 and int64 are their own accumulation type
}

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
                    Elem elem, Combine combine, float divide_by, Deadline deadline, Scratch& scratch_cache,
                    bool wide_output) {
  const int n = ctx.size, r = ctx.rank;
  const size_t eb = elem_bytes(elem), ab = acc_bytes(elem), ob = wide_output ? ab : eb;
  const char* in = static_cast<const char*>(input);
  if (block_elems == 0) return;
  if (n == 1) {
    // Nothing to combine; an average over one rank still divides (by 1).
    if (wide_output) widen_elems(elem, input, output, block_elems);
    else if (output != input) std::memcpy(output, input, block_elems * eb);
    return;
  }
  // Every element reduces on its own, so the block goes round the ring one window at a time:
  // the scratch (and what stays cached in it) is one window in the accumulation type, not a
  // whole block (a 0.75B model's tied embedding: 525 MB kept per rank after its first
  // reduction). Each element is folded in the same order as in one pass: the same bits.
  const size_t segment = std::max<size_t>(1, kSegmentBytes / ab);  // elements per message
  const size_t window = std::min(block_elems, segment * kSegmentsPerWindow);
  char* scratch[2] = {scratch_cache.get(0, window * ab), n > 2 ? scratch_cache.get(1, window * ab) : nullptr};
  std::unique_ptr<gloo::transport::UnboundBuffer> scratch_buf[2] = {
      ctx.createUnboundBuffer(scratch[0], window * ab),
      n > 2 ? ctx.createUnboundBuffer(scratch[1], window * ab) : nullptr};
  auto input_buf = ctx.createUnboundBuffer(const_cast<char*>(in), block_elems * eb * n);
  const int next = mod(r + 1, n), prev = mod(r - 1, n);
  for (size_t w0 = 0; w0 < block_elems; w0 += window) {
    const size_t count_in_window = std::min(window, block_elems - w0);
    // Step s sends the partial sums of block r-s-1 (s+1 contributions) and receives those of
    // block r-s-2; after n-1 steps the received block is r and holds every contribution.
    // Step 0 sends this rank's own input as is (narrow dtypes stay narrow on the wire); later
    // steps send float32/int64 partial sums, so bf16/fp16 accumulate in float32 and round once,
    // in the last fold. scratch[0] receives step 0; the partial sums then alternate between the
    // two buffers: one on the wire, one receiving and folding in place.
    int sending = 1, receiving = 0;
    for (int step = 0; step < n - 1; ++step) {
      const bool first = step == 0, last = step == n - 2;
      const size_t wire = first ? eb : ab;
      const char* own = in + (mod(r - step - 2, n) * block_elems + w0) * eb;
      gloo::transport::UnboundBuffer& to = *scratch_buf[receiving];
      gloo::transport::UnboundBuffer& from = first ? *input_buf : *scratch_buf[sending];
      const size_t send_base = first ? (mod(r - 1, n) * block_elems + w0) * eb : 0;
      size_t segments = 0;
      for (size_t e = 0; e < count_in_window; e += segment, ++segments)
        to.recv(prev, slot, e * wire, std::min(segment, count_in_window - e) * wire);
      for (size_t e = 0; e < count_in_window; e += segment)
        from.send(next, slot, send_base + e * wire, std::min(segment, count_in_window - e) * wire);
      // The fold of step 0 cannot run in place (narrow in, wide out): it goes to the other buffer.
      const int folded_into = first ? 1 : receiving;
      // Receives from one peer on one slot complete in the order they were posted.
      for (size_t e = 0; e < count_in_window; e += segment) {
        const size_t count = std::min(segment, count_in_window - e);
        wait_recv(to, deadline);
        void* dst = last ? static_cast<char*>(output) + (w0 + e) * ob : scratch[folded_into] + e * ab;
        fold_elem(elem, dst, !last || wide_output, scratch[receiving] + e * wire, !first, own + e * eb, count,
                  combine, last ? divide_by : 1.0f);
      }
      for (size_t i = 0; i < segments; ++i) wait_send(from, deadline);
      sending = folded_into;
      receiving = 1 - folded_into;
    }
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
