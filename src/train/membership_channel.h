// The worker's end of in-memory recovery's channel to its agent (rdzv/membership.h): descriptor
// CADRE_MEMBERSHIP_FD, given by `cadre run --recovery memory`.
#pragma once

#include <memory>
#include <vector>

#include "comm/comm.h"
#include "rdzv/membership.h"

namespace cadre {

// The worker's end. Absent (from_env() is null) unless the agent runs with --recovery memory.
class MembershipChannel {
 public:
  static std::unique_ptr<MembershipChannel> from_env();
  explicit MembershipChannel(int fd);
  ~MembershipChannel();
  MembershipChannel(const MembershipChannel&) = delete;
  MembershipChannel& operator=(const MembershipChannel&) = delete;

  // A new round was announced and not yet taken (non-blocking).
  bool pending();
  // Tells the agent a collective of `round` lost a peer (best effort: the agent may be gone too).
  void report_lost(int64_t round, int rank, const std::string& why);
  // The newest announced round, waiting up to timeout_s for one; Error when none comes or the
  // agent is gone. `base` supplies the job secret.
  comm::JobEnv next(const comm::JobEnv& base, double timeout_s);
  const rdzv::Membership& last() const { return last_; }

 private:
  void drain();
  rdzv::LineReader reader_;
  std::vector<rdzv::Membership> queued_;
  rdzv::Membership last_;
  bool closed_ = false;
};

}  // namespace cadre
