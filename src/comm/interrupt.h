// Waits of a communicator's ops that another thread can cut short (Communicator::abort): the op
// in flight ends at once instead of at its deadline, as when the agent reports that a node is
// gone (its link cut, nothing resets: every wait on it would last the whole deadline).
// Each communicator runs its ops on one thread of its own, which binds the communicator's
// Interrupt for its life; the waits of ring.cpp and inband.cpp find it there.
#pragma once

#include <mutex>
#include <string>
#include <vector>

#include "comm/ring.h"

namespace gloo::transport {
class UnboundBuffer;
}

namespace cadre::comm {

class Interrupt {
 public:
  // Ends the waits in progress and every later one (until reset()) with `reason`; the first
  // reason is kept. Any thread.
  void fire(const std::string& reason);
  bool fired() const;
  std::string reason() const;
  void reset();  // a rebuilt communicator waits again

  // While a wait blocks on `buffer` it is registered, so that fire() can wake it; Error naming
  // the reason when it was fired before.
  void enter(gloo::transport::UnboundBuffer* buffer, bool receiving);
  void leave(gloo::transport::UnboundBuffer* buffer);

 private:
  struct Waiting {
    gloo::transport::UnboundBuffer* buffer;
    bool receiving;
  };
  mutable std::mutex mu_;
  bool fired_ = false;
  std::string reason_;
  std::vector<Waiting> waiting_;
};

// The interrupt the calling thread's waits honour (none: only the deadline), for the life of
// the communication thread that calls it.
void bind_interrupt(Interrupt* interrupt);

// Until the buffer's pending receive (send) completes. Error when the deadline passes (Gloo's
// timeout error) or the bound interrupt fires ("aborted: <reason>").
void wait_recv(gloo::transport::UnboundBuffer& buffer, ring::Deadline deadline);
void wait_send(gloo::transport::UnboundBuffer& buffer, ring::Deadline deadline);

}  // namespace cadre::comm
