// getaddrinfo for IPv4 stream sockets (see ipv4_address.h).
#include "core/ipv4_address.h"

#include <netdb.h>
#include <sys/socket.h>

#include "core/error.h"

namespace cadre {

sockaddr_in resolve_ipv4(const std::string& host, uint16_t port) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0 || !found) throw Error(str("cannot resolve host '", host, "': ", gai_strerror(rc)));
  sockaddr_in addr = *reinterpret_cast<sockaddr_in*>(found->ai_addr);
  ::freeaddrinfo(found);
  addr.sin_port = htons(port);
  return addr;
}

}  // namespace cadre
