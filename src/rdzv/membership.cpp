// The agent <-> worker lines of in-memory recovery (see membership.h).
#include "rdzv/membership.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cadre::rdzv {

std::string membership_to_line(const Membership& m) {
  nlohmann::json j = {{"round", m.round},         {"restart_count", m.restart_count}, {"rank", m.rank},
                      {"world_size", m.world_size}, {"master_addr", m.master_addr},   {"master_port", m.master_port}};
  return j.dump() + "\n";
}

Membership membership_parse(const std::string& line) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(line);
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("membership line '", line, "' is not JSON: ", e.what()));
  }
  auto field = [&](const char* name) -> const nlohmann::json& {
    CADRE_CHECK(j.is_object() && j.contains(name), "membership line '", line, "' has no '", name, "'");
    return j.at(name);
  };
  Membership m;
  try {
    m.round = field("round").get<int64_t>();
    m.restart_count = field("restart_count").get<int64_t>();
    m.rank = field("rank").get<int>();
    m.world_size = field("world_size").get<int>();
    m.master_addr = field("master_addr").get<std::string>();
    m.master_port = field("master_port").get<int>();
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("membership line '", line, "': ", e.what()));
  }
  CADRE_CHECK(m.world_size >= 1 && m.rank >= 0 && m.rank < m.world_size, "membership line '", line,
              "': rank outside the world");
  CADRE_CHECK(m.master_port > 0 && m.master_port < 65536, "membership line '", line, "': master_port is not a port");
  return m;
}

std::string lost_peer_line(int64_t round, int rank, const std::string& why) {
  return nlohmann::json({{"lost", why}, {"round", round}, {"rank", rank}}).dump() + "\n";
}

std::optional<LostPeer> lost_peer_parse(const std::string& line) {
  try {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.is_object() && j.contains("lost") && j.at("lost").is_string() && j.contains("round"))
      return LostPeer{j.at("round").get<int64_t>(),
                      str("rank ", j.value("rank", -1), " lost a peer: ", j.at("lost").get<std::string>())};
  } catch (const nlohmann::json::exception&) {
    // not a report: the caller ignores the line
  }
  return std::nullopt;
}

std::string round_lost_line(int64_t round, const std::string& why) {
  return nlohmann::json({{"round_lost", why}, {"round", round}}).dump() + "\n";
}

std::optional<RoundLost> round_lost_parse(const std::string& line) {
  try {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.is_object() && j.contains("round_lost") && j.at("round_lost").is_string() && j.contains("round"))
      return RoundLost{j.at("round").get<int64_t>(), j.at("round_lost").get<std::string>()};
  } catch (const nlohmann::json::exception&) {
    // not this kind of line: the caller reads it as another
  }
  return std::nullopt;
}

std::vector<std::string> LineReader::read_available(bool* closed) {
  std::vector<std::string> lines;
  char buf[4096];
  for (;;) {
    ssize_t n = ::read(fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n <= 0) {
      if (closed) *closed = true;
      break;
    }
    for (std::string& line : buffer_.append(buf, static_cast<size_t>(n))) lines.push_back(std::move(line));
  }
  return lines;
}

}  // namespace cadre::rdzv
