// One connection as the job store server sees it, without the socket: the greeting it sends,
// the client's proof it checks, then the requests it decodes. Bytes in, bytes out, so the
// handshake and every bound can be tested and fuzzed on their own.
#pragma once

#include <string>
#include <vector>

#include "store/wire.h"

namespace cadre::store {

class ServerSession {
 public:
  // `nonce`: kNonceBytes fresh random bytes (auth.h random_bytes). The greeting is queued.
  ServerSession(std::string secret, std::string nonce);

  // Consumes bytes from the peer. Before authentication only a proof fits (kMaxHandshakeFrame):
  // a wrong one queues a refusal and ends the session (closing()). After it, returns the
  // requests completed by these bytes. ProtocolError (close at once) on anything malformed or
  // over a bound.
  std::vector<Request> receive(const char* data, size_t n);
  // Queues a reply to the oldest unanswered request.
  void reply(const Reply& reply);

  std::string take_output();  // bytes to send, in order
  bool authenticated() const { return authenticated_; }
  bool closing() const { return closing_; }  // refused: send what is queued, then close

 private:
  std::string secret_;  // a copy: the session must not depend on the caller's string living on
  std::string nonce_;
  FrameReader frames_{kMaxHandshakeFrame};
  std::string output_;
  bool authenticated_ = false, closing_ = false;
};

}  // namespace cadre::store
