// Server side of the store handshake and request framing (see session.h).
#include "store/session.h"

#include "store/auth.h"

namespace cadre::store {

ServerSession::ServerSession(std::string secret, std::string nonce) : secret_(std::move(secret)), nonce_(std::move(nonce)) {
  frame_append(output_, hello_encode(nonce_));
}

std::vector<Request> ServerSession::receive(const char* data, size_t n) {
  std::vector<Request> out;
  if (closing_) return out;
  frames_.feed(data, n);
  while (auto frame = frames_.next()) {
    if (!authenticated_) {
      auto [client_nonce, proof] = proof_decode(*frame);
      if (!proofs_equal(proof, auth_proof(secret_, Role::Client, nonce_, client_nonce))) {
        frame_append(output_, verdict_encode(false, "authentication failed: wrong job secret"));
        closing_ = true;
        return out;
      }
      frame_append(output_, verdict_encode(true, auth_proof(secret_, Role::Server, client_nonce, nonce_)));
      authenticated_ = true;
      frames_.set_max_frame(kMaxFrame);
      continue;
    }
    out.push_back(request_decode(*frame));
  }
  return out;
}

void ServerSession::reply(const Reply& reply) { frame_append(output_, reply_encode(reply)); }

std::string ServerSession::take_output() {
  std::string out;
  out.swap(output_);
  return out;
}

}  // namespace cadre::store
