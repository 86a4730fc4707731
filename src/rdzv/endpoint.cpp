// Network helpers for rendezvous (see endpoint.h).
#include "rdzv/endpoint.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>

#include "core/error.h"
#include "core/ipv4_address.h"

namespace cadre::rdzv {
namespace {

struct Socket {
  int fd;
  explicit Socket(int type) : fd(::socket(AF_INET, type | SOCK_CLOEXEC, 0)) {
    CADRE_CHECK(fd >= 0, "socket(): ", std::strerror(errno));
  }
  ~Socket() { ::close(fd); }
};

}  // namespace

Endpoint endpoint_parse(const std::string& text, uint16_t default_port) {
  Endpoint e;
  auto colon = text.rfind(':');
  if (colon == std::string::npos) {
    e.host = text;
    e.port = default_port;
  } else {
    e.host = text.substr(0, colon);
    std::string port = text.substr(colon + 1);
    size_t used = 0;
    long value = -1;
    try { value = std::stol(port, &used); } catch (const std::exception&) { used = 0; }
    CADRE_CONFIG_CHECK(used == port.size() && !port.empty() && value >= 0 && value <= 65535,
                       "endpoint '", text, "': port must be a number in 0..65535");
    e.port = static_cast<uint16_t>(value);
  }
  CADRE_CONFIG_CHECK(!e.host.empty(), "endpoint '", text, "': missing host");
  return e;
}

bool host_is_local(const std::string& host) {
  sockaddr_in addr = resolve_ipv4(host, 0);
  if ((ntohl(addr.sin_addr.s_addr) >> 24) == 127) return true;
  // Binding succeeds only for addresses of this machine.
  Socket s(SOCK_DGRAM);
  return ::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

bool port_is_free(const std::string& host, uint16_t port) {
  sockaddr_in addr = resolve_ipv4(host, port);
  Socket s(SOCK_STREAM);
  int one = 1;
  ::setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  return ::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
}

uint16_t free_port(const std::string& host) {
  sockaddr_in addr = resolve_ipv4(host, 0);
  Socket s(SOCK_STREAM);
  CADRE_CHECK(::bind(s.fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0,
              "cannot bind a port on ", host, ": ", std::strerror(errno));
  socklen_t len = sizeof addr;
  CADRE_CHECK(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0, "getsockname: ", std::strerror(errno));
  return ntohs(addr.sin_port);
}

std::string local_address_towards(const std::string& host) {
  sockaddr_in peer = resolve_ipv4(host, 9);
  Socket s(SOCK_DGRAM);
  CADRE_CHECK(::connect(s.fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0,
              "no route to ", host, ": ", std::strerror(errno));
  sockaddr_in self{};
  socklen_t len = sizeof self;
  CADRE_CHECK(::getsockname(s.fd, reinterpret_cast<sockaddr*>(&self), &len) == 0, "getsockname: ", std::strerror(errno));
  char buf[INET_ADDRSTRLEN];
  ::inet_ntop(AF_INET, &self.sin_addr, buf, sizeof buf);
  return buf;
}

}  // namespace cadre::rdzv
