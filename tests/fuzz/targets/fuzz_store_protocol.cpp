// The job store's wire protocol from both ends. The first byte picks the side:
//   0: a peer without the secret talks to a server session (handshake, bounds): it must never
//      get authenticated;
//   1: an authenticated client's request frames, served from a key table;
//   2: what a client decodes from a server (greeting, verdict, replies).
#include "fuzz_target.h"
#include "store/auth.h"
#include "store/key_table.h"
#include "store/session.h"
#include "store/wire.h"

using namespace cadre::store;

namespace {

const std::string kSecret = "fuzz-job-secret-0123456789";
const std::string kServerNonce(kNonceBytes, 's'), kClientNonce(kNonceBytes, 'c');

std::string proof_frame() {
  std::string out;
  frame_append(out, proof_encode(kClientNonce, auth_proof(kSecret, Role::Client, kServerNonce, kClientNonce)));
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string rest = cadre::fuzz::text(data + 1, size - 1);
  switch (data[0] % 3) {
    case 0: {
      // A secret the inputs cannot know (the seeds carry a well-formed proof for kSecret).
      ServerSession session(kSecret + "-not-the-peers", kServerNonce);
      cadre::fuzz::only_cadre_errors([&] {
        // In two parts, as bytes arrive from a socket.
        const size_t cut = rest.empty() ? 0 : static_cast<uint8_t>(rest[0]) % rest.size();
        session.receive(rest.data(), cut);
        session.receive(rest.data() + cut, rest.size() - cut);
      });
      if (session.authenticated()) cadre::fuzz::violated("a peer without the secret was authenticated");
      break;
    }
    case 1: {
      ServerSession session(kSecret, kServerNonce);
      KeyTable table;
      cadre::fuzz::only_cadre_errors([&] {
        const std::string proof = proof_frame();
        if (!session.receive(proof.data(), proof.size()).empty() || !session.authenticated())
          cadre::fuzz::violated("the right proof was not accepted");
        session.take_output();  // greeting and verdict
        for (const Request& r : session.receive(rest.data(), rest.size())) {
          session.reply(table.ready(r) ? table.apply(r) : table.timed_out(r));
          reply_decode(session.take_output().substr(4));
        }
      });
      break;
    }
    default: {
      FrameReader frames(kMaxFrame);
      frames.feed(rest.data(), rest.size());
      cadre::fuzz::only_cadre_errors([&] {
        while (auto f = frames.next()) {
          cadre::fuzz::only_cadre_errors([&] { hello_decode(*f); });
          cadre::fuzz::only_cadre_errors([&] { verdict_decode(*f); });
          cadre::fuzz::only_cadre_errors([&] { reply_decode(*f); });
          cadre::fuzz::only_cadre_errors([&] { request_decode(*f); });
        }
      });
      break;
    }
  }
  return 0;
}
