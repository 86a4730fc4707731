// The agent -> worker channel of in-memory recovery (`cadre run --recovery memory`): a socket
// pair whose worker end is descriptor 4 (CADRE_MEMBERSHIP_FD). The agent writes one line per
// rendezvous round its live workers go on into (their new rank, world and master), and one when
// a round ends because a node is gone (the workers abort that round's collectives); a worker
// writes one line when a collective lost a peer, so the agent ends the round at once instead of
// waiting for a heartbeat deadline. Lines are JSON objects, one per line.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/line_buffer.h"

namespace cadre::rdzv {

constexpr const char* kMembershipFdEnv = "CADRE_MEMBERSHIP_FD";
constexpr int kMembershipFd = 4;
constexpr const char* kRoundEnv = "CADRE_RDZV_ROUND";  // the round a worker started in

// What a worker needs to join the next round without being restarted.
struct Membership {
  int64_t round = 0;
  int64_t restart_count = 0;
  int rank = 0, world_size = 1;
  std::string master_addr;
  int master_port = 0;
};

std::string membership_to_line(const Membership& m);  // one JSON line, '\n' included
// Error naming the field when the line is not a membership.
Membership membership_parse(const std::string& line);
// A worker's report that a collective of round `round` lost a peer.
std::string lost_peer_line(int64_t round, int rank, const std::string& why);
struct LostPeer {
  int64_t round = -1;
  std::string reason;  // "rank R lost a peer: ..."
};
// nullopt for anything but a lost_peer_line.
std::optional<LostPeer> lost_peer_parse(const std::string& line);

// The agent's word that round `round` is over because a node is gone (`why`): the workers'
// collectives of that round could only wait for it, so they abort them (a cut link resets
// nothing: without this they would wait out parallel.comm_timeout).
std::string round_lost_line(int64_t round, const std::string& why);
struct RoundLost {
  int64_t round = -1;
  std::string reason;
};
// nullopt for anything but a round_lost_line.
std::optional<RoundLost> round_lost_parse(const std::string& line);

// Reads whole lines from a non-blocking descriptor, keeping a partial one for the next call.
class LineReader {
 public:
  explicit LineReader(int fd) : fd_(fd) {}
  // Every complete line available now; `closed` is set when the other end is gone.
  std::vector<std::string> read_available(bool* closed = nullptr);
  int fd() const { return fd_; }

 private:
  int fd_;
  LineBuffer buffer_;
};

}  // namespace cadre::rdzv
