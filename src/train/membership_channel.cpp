// The worker's end of in-memory recovery's channel (see membership_channel.h).
#include "train/membership_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "core/error.h"

namespace cadre {

using rdzv::kMembershipFdEnv;

std::unique_ptr<MembershipChannel> MembershipChannel::from_env() {
  const char* v = std::getenv(kMembershipFdEnv);
  if (!v || !*v) return nullptr;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  CADRE_CONFIG_CHECK(end && *end == 0 && fd >= 0 && ::fcntl(int(fd), F_GETFD) >= 0, kMembershipFdEnv, "='", v,
                     "' is not an open descriptor (set by `cadre run --recovery memory`)");
  return std::make_unique<MembershipChannel>(int(fd));
}

MembershipChannel::MembershipChannel(int fd) : reader_(fd) {
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never handed on to a program this worker starts
}

MembershipChannel::~MembershipChannel() { ::close(reader_.fd()); }

void MembershipChannel::drain() {
  for (const std::string& line : reader_.read_available(&closed_))
    if (!line.empty()) queued_.push_back(rdzv::membership_parse(line));
}

bool MembershipChannel::pending() {
  drain();
  return !queued_.empty();
}

void MembershipChannel::report_lost(int64_t round, int rank, const std::string& why) {
  const std::string line = rdzv::lost_peer_line(round, rank, why);
  // A line this short goes in one write; a full or closed socket means the agent cannot listen.
  ssize_t ignored = ::send(reader_.fd(), line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

comm::JobEnv MembershipChannel::next(const comm::JobEnv& base, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    drain();
    if (!queued_.empty()) break;
    CADRE_CHECK(!closed_, "rank ", base.rank, ": the agent closed the membership channel (it is gone)");
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    CADRE_CHECK(left.count() > 0, "rank ", base.rank, ": no new membership from the agent within ", timeout_s, " s");
    pollfd p{reader_.fd(), POLLIN, 0};
    ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count(), 1000)));
  }
  last_ = queued_.back();  // an older round announced meanwhile is already over
  queued_.clear();
  comm::JobEnv env = base;
  env.rank = last_.rank;
  env.world_size = last_.world_size;
  env.master_addr = last_.master_addr;
  env.master_port = last_.master_port;
  return env;
}

}  // namespace cadre
