// The header exchange of a validated collective: one message to and from every peer on one
// slot, each a Header followed by up to kMaxPayload bytes of the op's data.
#include "comm/inband.h"

#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <cstring>

#include "comm/interrupt.h"
#include "core/error.h"

namespace cadre::comm::inband {
namespace {

constexpr size_t kRegion = sizeof(Header) + kMaxPayload;

}  // namespace

Received exchange(gloo::Context& ctx, uint64_t slot, const Header& mine, const PayloadFor& payload_for,
                  Staging& staging, ring::Deadline deadline) {
  const int n = ctx.size, r = ctx.rank;
  Received got;
  got.headers.assign(n, Header{});
  got.payloads.assign(n, nullptr);
  got.headers[r] = mine;
  if (n == 1) return got;
  // Region i of each buffer belongs to the peer i ranks after this one.
  const size_t bytes = kRegion * size_t(n - 1);
  if (staging.recv.size() < bytes) staging.recv.resize(bytes);
  if (staging.send.size() < bytes) staging.send.resize(bytes);
  auto recv_buf = ctx.createUnboundBuffer(staging.recv.data(), bytes);
  auto send_buf = ctx.createUnboundBuffer(staging.send.data(), bytes);
  // Post every receive first, at the largest size a peer may send: a peer that disagrees
  // about the op then still sends a message that fits, and the verdict comes from its header.
  for (int i = 1; i < n; ++i) recv_buf->recv((r + i) % n, slot, kRegion * (i - 1), kRegion);
  for (int i = 1; i < n; ++i) {
    const int peer = (r + i) % n;
    char* region = staging.send.data() + kRegion * (i - 1);
    auto [data, size] = payload_for(peer);
    CADRE_CHECK(size <= kMaxPayload, "in-band payload of ", size, " bytes exceeds ", kMaxPayload);
    Header h = mine;
    h.magic = kMagic;
    h.payload_bytes = int64_t(size);
    std::memcpy(region, &h, sizeof h);
    if (size) std::memcpy(region + sizeof h, data, size);
    send_buf->send(peer, slot, kRegion * (i - 1), sizeof h + size);
  }
  for (int i = 1; i < n; ++i) wait_recv(*recv_buf, deadline);
  for (int i = 1; i < n; ++i) wait_send(*send_buf, deadline);
  for (int i = 1; i < n; ++i) {
    const int peer = (r + i) % n;
    const char* region = staging.recv.data() + kRegion * (i - 1);
    Header h;
    std::memcpy(&h, region, sizeof h);
    CADRE_CHECK(h.magic == kMagic && h.payload_bytes >= 0 && size_t(h.payload_bytes) <= kMaxPayload,
                "rank ", peer, " of this group sent a message that is not a collective header (magic ", h.magic,
                ", payload ", h.payload_bytes, " bytes): the ranks' connections are out of step");
    got.headers[peer] = h;
    got.payloads[peer] = region + sizeof h;
  }
  return got;
}

}  // namespace cadre::comm::inband
