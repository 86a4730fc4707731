// Encoding and bounded decoding of the job store's frames and messages (see wire.h).
#include "store/wire.h"

#include <cstring>

namespace cadre::store {
namespace {

void put_u32(std::string& out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(b, 4);
}

void put_i64(std::string& out, int64_t v) {
  const uint64_t u = static_cast<uint64_t>(v);
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>((u >> (8 * i)) & 0xff);
  out.append(b, 8);
}

void put_string(std::string& out, const std::string& s) {
  put_u32(out, static_cast<uint32_t>(s.size()));
  out += s;
}

uint32_t u32_at(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(p[i])) << (8 * i);
  return v;
}

// Reads fields front to back; every read checks what is left, every string its bound.
class Cursor {
 public:
  Cursor(const std::string& data, const char* what) : data_(data), what_(what) {}
  uint8_t u8() { return static_cast<uint8_t>(*take(1)); }
  uint32_t u32() { return u32_at(take(4)); }
  int64_t i64() {
    const char* p = take(8);
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i) u |= static_cast<uint64_t>(static_cast<uint8_t>(p[i])) << (8 * i);
    return static_cast<int64_t>(u);
  }
  std::string bytes(size_t n) { return std::string(take(n), n); }
  std::string string(uint32_t max, const char* field) {
    const uint32_t n = u32();
    if (n > max) throw ProtocolError(str(what_, ": ", field, " of ", n, " bytes exceeds the limit of ", max));
    return bytes(n);
  }
  void finish() const {
    if (at_ != data_.size()) throw ProtocolError(str(what_, ": ", data_.size() - at_, " unexpected trailing bytes"));
  }

 private:
  const char* take(size_t n) {
    if (n > data_.size() - at_) throw ProtocolError(str(what_, ": truncated (", data_.size(), " bytes)"));
    const char* p = data_.data() + at_;
    at_ += n;
    return p;
  }
  const std::string& data_;
  const char* what_;
  size_t at_ = 0;
};

bool one_key(Op op) {
  return op == Op::Set || op == Op::Get || op == Op::Add || op == Op::CompareSet || op == Op::Delete ||
         op == Op::SetSession;
}

}  // namespace

void frame_append(std::string& out, const std::string& payload) {
  put_u32(out, static_cast<uint32_t>(payload.size()));
  out += payload;
}

std::optional<std::string> FrameReader::next() {
  if (buffer_.size() < 4) return std::nullopt;
  const uint32_t n = u32_at(buffer_.data());
  if (n > max_frame_)
    throw ProtocolError(str("a frame of ", n, " bytes exceeds the limit of ", max_frame_, " bytes"));
  if (buffer_.size() - 4 < n) return std::nullopt;
  std::string payload = buffer_.substr(4, n);
  buffer_.erase(0, 4 + static_cast<size_t>(n));
  return payload;
}

std::string hello_encode(const std::string& server_nonce) {
  std::string out(kMagic, sizeof kMagic);
  out += static_cast<char>(kVersion);
  return out + server_nonce;
}

std::string hello_decode(const std::string& payload) {
  Cursor c(payload, "store greeting");
  if (c.bytes(sizeof kMagic) != std::string(kMagic, sizeof kMagic))
    throw ProtocolError("the peer is not a Cadre job store (bad greeting)");
  const uint8_t version = c.u8();
  if (version != kVersion)
    throw ProtocolError(str("the store speaks protocol version ", int(version), ", this build ", int(kVersion)));
  std::string nonce = c.bytes(kNonceBytes);
  c.finish();
  return nonce;
}

std::string proof_encode(const std::string& client_nonce, const std::string& proof) { return client_nonce + proof; }

std::pair<std::string, std::string> proof_decode(const std::string& payload) {
  Cursor c(payload, "client proof");
  std::string nonce = c.bytes(kNonceBytes), proof = c.bytes(kProofBytes);
  c.finish();
  return {nonce, proof};
}

std::string verdict_encode(bool accepted, const std::string& proof_or_reason) {
  return std::string(1, accepted ? '\1' : '\0') + proof_or_reason;
}

std::pair<bool, std::string> verdict_decode(const std::string& payload) {
  Cursor c(payload, "store verdict");
  const bool accepted = c.u8() == 1;
  return {accepted, payload.substr(1)};
}

std::string request_encode(const Request& r) {
  std::string out(1, static_cast<char>(r.op));
  switch (r.op) {
    case Op::Set:
    case Op::SetSession: put_string(out, r.keys.at(0)); put_string(out, r.value); break;
    case Op::Get: put_string(out, r.keys.at(0)); put_u32(out, r.wait_ms); break;
    case Op::Add: put_string(out, r.keys.at(0)); put_i64(out, r.delta); break;
    case Op::CompareSet: put_string(out, r.keys.at(0)); put_string(out, r.value); put_string(out, r.desired); break;
    case Op::Delete: put_string(out, r.keys.at(0)); break;
    case Op::Check:
    case Op::Wait:
      put_u32(out, static_cast<uint32_t>(r.keys.size()));
      for (const auto& k : r.keys) put_string(out, k);
      if (r.op == Op::Wait) put_u32(out, r.wait_ms);
      break;
    case Op::NumKeys:
    case Op::Ping: break;
  }
  return out;
}

Request request_decode(const std::string& payload) {
  Cursor c(payload, "store request");
  Request r;
  const uint8_t op = c.u8();
  if (op < static_cast<uint8_t>(Op::Set) || op > static_cast<uint8_t>(Op::SetSession))
    throw ProtocolError(str("store request: unknown operation ", int(op)));
  r.op = static_cast<Op>(op);
  if (one_key(r.op)) r.keys.push_back(c.string(kMaxKeyBytes, "key"));
  switch (r.op) {
    case Op::Set:
    case Op::SetSession: r.value = c.string(kMaxValueBytes, "value"); break;
    case Op::Get: r.wait_ms = c.u32(); break;
    case Op::Add: r.delta = c.i64(); break;
    case Op::CompareSet:
      r.value = c.string(kMaxValueBytes, "expected value");
      r.desired = c.string(kMaxValueBytes, "desired value");
      break;
    case Op::Check:
    case Op::Wait: {
      const uint32_t n = c.u32();
      if (n > kMaxKeysPerRequest) throw ProtocolError(str("store request: ", n, " keys exceed the limit of ", kMaxKeysPerRequest));
      for (uint32_t i = 0; i < n; ++i) r.keys.push_back(c.string(kMaxKeyBytes, "key"));
      if (r.op == Op::Wait) r.wait_ms = c.u32();
      break;
    }
    default: break;
  }
  c.finish();
  return r;
}

std::string reply_encode(const Reply& r) {
  std::string out(1, static_cast<char>(r.status));
  put_string(out, r.value);
  put_i64(out, r.number);
  return out;
}

Reply reply_decode(const std::string& payload) {
  Cursor c(payload, "store reply");
  Reply r;
  const uint8_t status = c.u8();
  if (status > static_cast<uint8_t>(Status::Failed)) throw ProtocolError(str("store reply: unknown status ", int(status)));
  r.status = static_cast<Status>(status);
  r.value = c.string(kMaxValueBytes, "value");
  r.number = c.i64();
  c.finish();
  return r;
}

}  // namespace cadre::store
