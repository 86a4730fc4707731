// In-band validation: the first exchange of every validated collective carries a fixed header
// (sequence number, group generation and the op's shape digest) in the same message as the
// data of a small op, sent to and received from every peer. Every rank therefore sees every
// rank's header before it folds anything, and all reach the same verdict without a store
// round trip. Receives are posted at the largest size any peer may send, so a peer that
// disagrees about the op never sends Gloo a message larger than the posted receive (which
// Gloo would treat as a broken pair).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/ring.h"

namespace gloo {
class Context;
}

namespace cadre::comm::inband {

// One rank's view of the collective it is entering; compared field by field across ranks.
struct Header {
  uint64_t magic = 0;
  int64_t seq = 0;         // collectives this communicator has started in its generation
  int64_t generation = 0;  // rebuild() count
  int64_t kind = 0;        // op (all_reduce, ...)
  int64_t dtype = 0;
  int64_t numel = 0;       // elements of the input
  int64_t detail = 0;      // reduction or root
  int64_t payload_bytes = 0;  // data that follows the header in this message
  bool same_op(const Header& o) const {
    return kind == o.kind && dtype == o.dtype && numel == o.numel && detail == o.detail;
  }
};
static_assert(sizeof(Header) == 64, "the wire header is 64 bytes");
constexpr uint64_t kMagic = 0x43414452455f4f50ull;  // "CADRE_OP"

// Largest payload a header may carry: ops whose per-peer data fits go in one exchange.
constexpr size_t kMaxPayload = size_t(128) << 10;

// Buffers reused between ops (one region of header + kMaxPayload per peer, each way).
struct Staging {
  std::vector<char> recv, send;
};

// What the exchange received: every rank's header (this rank's own at its index) and the
// payload each peer sent (nullptr for this rank).
struct Received {
  std::vector<Header> headers;
  std::vector<const char*> payloads;
};

// The bytes to send to `peer` after the header: {pointer, size}, size <= kMaxPayload.
using PayloadFor = std::function<std::pair<const void*, size_t>(int peer)>;

// Sends `mine` (payload_bytes filled in per peer) plus payload_for(peer) to every peer on
// `slot` and receives every peer's header and payload. Throws on a malformed header (not
// Cadre's, or a payload larger than kMaxPayload) and on a transport error or the deadline.
Received exchange(gloo::Context& ctx, uint64_t slot, const Header& mine, const PayloadFor& payload_for,
                  Staging& staging, ring::Deadline deadline);

}  // namespace cadre::comm::inband
