// Blocks SIGPIPE on the calling thread for a scope.
//
// Gloo's TCP pairs write with writev, which raises SIGPIPE when the peer has closed its end (a
// rank that left, or one that rebuilt while the others still send): that signal's default
// action kills the process silently, where the write's EPIPE would fail the op with an error
// that names it. Gloo writes on its device thread and on the threads that post sends (our
// communication thread); both block SIGPIPE (the device thread inherits the mask it is
// created with), so the write returns EPIPE. The program's own threads are left as they are.
#pragma once

#include <pthread.h>
#include <signal.h>

namespace cadre::comm {

class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t old_;
};

}  // namespace cadre::comm
