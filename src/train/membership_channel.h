// The worker's end of in-memory recovery's channel to its agent (rdzv/membership.h): descriptor
// CADRE_MEMBERSHIP_FD, given by `cadre run --recovery memory`. A thread of its own reads it, so
// that the agent's word that a node is gone reaches the worker while it waits in a collective.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "rdzv/membership.h"

namespace cadre {

// The worker's end. Absent (from_env() is null) unless the agent runs with --recovery memory.
class MembershipChannel {
 public:
  using AbortHandler = std::function<void(const std::string& reason)>;

  static std::unique_ptr<MembershipChannel> from_env();
  // `round`: the rendezvous round this worker starts in.
  MembershipChannel(int fd, int64_t round);
  ~MembershipChannel();
  MembershipChannel(const MembershipChannel&) = delete;
  MembershipChannel& operator=(const MembershipChannel&) = delete;

  // A new round was announced and not yet taken (non-blocking).
  bool pending();
  // Tells the agent a collective of the current round lost a peer (best effort: the agent may
  // be gone too).
  void report_lost(int rank, const std::string& why);
  // The newest announced round, waiting up to timeout_s for one; Error when none comes or the
  // agent is gone. `base` supplies the job secret.
  comm::JobEnv next(const comm::JobEnv& base, double timeout_s);
  const rdzv::Membership& last() const { return last_; }
  int64_t round() const;  // the round this worker is in

  // While set, called on the reader thread when the agent says the current round lost a node;
  // it aborts that round's communicators. A notice that came before (while the round's trainer
  // was being built, or before next() took the round) calls it at once, on the calling thread.
  // Cleared with nullptr (which waits for a call in progress).
  void set_abort_handler(AbortHandler abort);

 private:
  void read_lines();
  void take(const std::string& line);  // under mu_
  void rethrow_read_error();           // under mu_
  void call_abort(const std::string& reason);  // under mu_: the handler, if one is set

  int fd_;
  int wake_fd_;  // eventfd: ends the reader thread
  rdzv::LineReader reader_;
  mutable std::mutex mu_;
  std::condition_variable changed_;
  std::vector<rdzv::Membership> queued_;
  bool closed_ = false;
  std::exception_ptr read_error_;  // a line the worker cannot read, rethrown on the main thread
  int64_t round_;
  AbortHandler abort_;
  int64_t lost_round_ = -1;  // the newest round the agent said lost a node, and why
  std::string lost_reason_;
  rdzv::Membership last_;
  std::thread thread_;
};

}  // namespace cadre
