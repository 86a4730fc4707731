// The job store's wire protocol: length-prefixed frames, the authentication handshake, and
// requests and replies, with every length read from the network bounded before anything is
// allocated for it. Pure encoding and decoding (no sockets), so the fuzzer can drive it.
//
//   frame      = u32 payload length (little-endian) + payload
//   handshake  server: HELLO  = "CADRESTO" u8 version  32-byte server nonce
//              client: PROOF  = 32-byte client nonce   HMAC-SHA256(secret, "client" | ns | nc)
//              server: VERDICT= u8 1 + HMAC-SHA256(secret, "server" | nc | ns)   (accepted)
//                             | u8 0 + reason                                  (refused, then closed)
//   request    = u8 op, then its fields; strings are u32 length + bytes, integers i64/u32 LE
//   reply      = u8 status (ok, not found, timed out, error), then the op's fields
// The secret itself never crosses the wire; each side proves it knows it for fresh nonces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"

namespace cadre::store {

// A peer broke the protocol (a length over a bound, a truncated field, an unknown op). The
// connection is closed; the store itself is unaffected.
class ProtocolError : public Error {
 public:
  using Error::Error;
};

inline constexpr char kMagic[8] = {'C', 'A', 'D', 'R', 'E', 'S', 'T', 'O'};
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kProofBytes = 32;  // HMAC-SHA256
// Bounds. Before authentication a frame can only be a handshake message.
inline constexpr uint32_t kMaxHandshakeFrame = 128;
inline constexpr uint32_t kMaxKeyBytes = 4096;
inline constexpr uint32_t kMaxValueBytes = 16u << 20;
inline constexpr uint32_t kMaxKeysPerRequest = 1024;
inline constexpr uint32_t kMaxFrame = 2 * kMaxValueBytes + 2 * kMaxKeyBytes + 64;

// SetSession: as Set, and the store deletes the key when the connection that set it closes
// (an agent's "I am alive" that needs no heartbeat to expire).
enum class Op : uint8_t { Set = 1, Get, Add, CompareSet, Check, Delete, NumKeys, Wait, Ping, SetSession };
enum class Status : uint8_t { Ok = 0, NotFound = 1, TimedOut = 2, Failed = 3 };

struct Request {
  Op op = Op::Ping;
  std::vector<std::string> keys;  // Set/Get/Add/CompareSet/Delete/SetSession: one; Check/Wait: several
  std::string value;              // Set, SetSession: the value; CompareSet: the expected value ("" = absent)
  std::string desired;            // CompareSet
  int64_t delta = 0;              // Add
  uint32_t wait_ms = 0;           // Get (0: do not wait for the key), Wait
};

struct Reply {
  Status status = Status::Ok;
  std::string value;    // Get, CompareSet: the value stored afterwards; Failed: the reason
  int64_t number = 0;   // Add: the new value; Check/Delete: 0 or 1; NumKeys: the count
};

// Appends one frame holding `payload` to `out`.
void frame_append(std::string& out, const std::string& payload);

// Cuts a byte stream into frames. `feed` appends bytes; `next` returns the next complete
// frame's payload. A length over `max_frame` is a ProtocolError as soon as its 4 bytes are in:
// nothing of that size is ever buffered.
class FrameReader {
 public:
  explicit FrameReader(uint32_t max_frame) : max_frame_(max_frame) {}
  void set_max_frame(uint32_t max_frame) { max_frame_ = max_frame; }
  void feed(const char* data, size_t n) { buffer_.append(data, n); }
  std::optional<std::string> next();
  size_t buffered() const { return buffer_.size(); }

 private:
  uint32_t max_frame_;
  std::string buffer_;
};

std::string hello_encode(const std::string& server_nonce);
std::string hello_decode(const std::string& payload);  // the server nonce
std::string proof_encode(const std::string& client_nonce, const std::string& proof);
std::pair<std::string, std::string> proof_decode(const std::string& payload);  // nonce, proof
std::string verdict_encode(bool accepted, const std::string& proof_or_reason);
std::pair<bool, std::string> verdict_decode(const std::string& payload);

std::string request_encode(const Request& request);
Request request_decode(const std::string& payload);
std::string reply_encode(const Reply& reply);
Reply reply_decode(const std::string& payload);

}  // namespace cadre::store
