// The worker's end of in-memory recovery's channel (see membership_channel.h).
#include "train/membership_channel.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>

#include "core/error.h"
#include "core/log.h"

namespace cadre {

using rdzv::kMembershipFdEnv;

std::unique_ptr<MembershipChannel> MembershipChannel::from_env() {
  const char* v = std::getenv(kMembershipFdEnv);
  if (!v || !*v) return nullptr;
  char* end = nullptr;
  const long fd = std::strtol(v, &end, 10);
  CADRE_CONFIG_CHECK(end && *end == 0 && fd >= 0 && ::fcntl(int(fd), F_GETFD) >= 0, kMembershipFdEnv, "='", v,
                     "' is not an open descriptor (set by `cadre run --recovery memory`)");
  const char* round = std::getenv(rdzv::kRoundEnv);
  return std::make_unique<MembershipChannel>(int(fd), round ? std::strtoll(round, nullptr, 10) : 0);
}

MembershipChannel::MembershipChannel(int fd, int64_t round)
    : fd_(fd), wake_fd_(::eventfd(0, EFD_CLOEXEC)), reader_(fd), round_(round) {
  CADRE_CHECK(wake_fd_ >= 0, "membership channel: eventfd failed");
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK);
  ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // never handed on to a program this worker starts
  thread_ = std::thread([this] { read_lines(); });
}

MembershipChannel::~MembershipChannel() {
  const uint64_t one = 1;
  ssize_t ignored = ::write(wake_fd_, &one, sizeof one);
  (void)ignored;
  thread_.join();
  ::close(wake_fd_);
  ::close(fd_);
}

void MembershipChannel::read_lines() {
  for (;;) {
    pollfd p[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    if (::poll(p, 2, -1) < 0) continue;  // EINTR
    if (p[1].revents) return;
    bool closed = false;
    std::vector<std::string> lines = reader_.read_available(&closed);
    std::lock_guard<std::mutex> lock(mu_);
    for (const std::string& line : lines)
      if (!line.empty() && !read_error_) take(line);
    closed_ = closed_ || closed;
    changed_.notify_all();
    if (closed_ || read_error_) return;
  }
}

void MembershipChannel::take(const std::string& line) {
  if (auto lost = rdzv::round_lost_parse(line)) {
    // A round this worker already left is over for it anyway. One announced but not yet taken
    // (the notice overtook next()) is remembered, as is one that comes while no handler is set
    // (a trainer being built for the round): set_abort_handler applies it.
    if (lost->round < round_) return;
    if (lost->round >= lost_round_) {
      lost_round_ = lost->round;
      lost_reason_ = lost->reason;
    }
    if (lost->round == round_) call_abort(lost->reason);
    return;
  }
  try {
    queued_.push_back(rdzv::membership_parse(line));
  } catch (...) {
    read_error_ = std::current_exception();
  }
}

void MembershipChannel::rethrow_read_error() {
  if (read_error_) std::rethrow_exception(read_error_);
}

bool MembershipChannel::pending() {
  std::lock_guard<std::mutex> lock(mu_);
  rethrow_read_error();
  return !queued_.empty();
}

int64_t MembershipChannel::round() const {
  std::lock_guard<std::mutex> lock(mu_);
  return round_;
}

void MembershipChannel::set_abort_handler(AbortHandler abort) {
  std::lock_guard<std::mutex> lock(mu_);
  abort_ = std::move(abort);
  if (lost_round_ == round_) call_abort(lost_reason_);
}

void MembershipChannel::call_abort(const std::string& reason) {
  if (!abort_) return;
  log::warn(str("recovery: the agent reports round ", round_, " lost a node (", reason, "); aborting its collectives"));
  abort_(str("the agent reports a lost node: ", reason));
}

void MembershipChannel::report_lost(int rank, const std::string& why) {
  const std::string line = rdzv::lost_peer_line(round(), rank, why);
  // A line this short goes in one write; a full or closed socket means the agent cannot listen.
  ssize_t ignored = ::send(fd_, line.data(), line.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  (void)ignored;
}

comm::JobEnv MembershipChannel::next(const comm::JobEnv& base, double timeout_s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  std::unique_lock<std::mutex> lock(mu_);
  changed_.wait_until(lock, deadline, [&] { return !queued_.empty() || closed_ || read_error_; });
  rethrow_read_error();
  if (queued_.empty()) {
    CADRE_CHECK(!closed_, "rank ", base.rank, ": the agent closed the membership channel (it is gone)");
    throw Error(str("rank ", base.rank, ": no new membership from the agent within ", timeout_s, " s"));
  }
  last_ = queued_.back();  // an older round announced meanwhile is already over
  queued_.clear();
  round_ = last_.round;
  comm::JobEnv env = base;
  env.rank = last_.rank;
  env.world_size = last_.world_size;
  env.master_addr = last_.master_addr;
  env.master_port = last_.master_port;
  return env;
}

}  // namespace cadre
