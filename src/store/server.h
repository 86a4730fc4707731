// The job store server: Cadre's replacement for c10d's TCPStore, hosted by the agent that
// holds the rendezvous and by each job's rank 0 (MASTER_PORT). It listens on one address, not
// every interface; every connection must prove it knows the job secret before its first
// request (auth.h); every length from the network is bounded (wire.h); a peer that breaks the
// protocol, stays silent through the handshake, or fails to authenticate is dropped and
// changes nothing. One thread, poll(), non-blocking sockets.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace cadre::store {

// The address to listen on for a store that peers reach at `host`: an IP literal or
// "localhost" as given (loopback stays loopback); a name that resolves to an address of this
// machine, that address; otherwise "" (every interface: e.g. a name that resolves to loopback
// here, as Debian maps the hostname, while other machines resolve it to this one).
std::string listen_address_for(const std::string& host);

class StoreServer {
 public:
  // Listens on address:port (port 0 picks a free one; address "" = every interface) and serves
  // until destroyed. Error naming the address when it cannot bind.
  StoreServer(const std::string& address, uint16_t port, std::string secret);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  const std::string& address() const;  // as listened on ("0.0.0.0" for every interface)

  // Connections refused so far (failed authentication, broken protocol, silent handshake).
  int64_t refused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::store
