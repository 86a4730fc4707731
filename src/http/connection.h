// One accepted connection, served on its own thread: reads requests under the header, body and
// idle deadlines, hands each to the handler in order, answers the parser's errors, and closes
// (lingering when the client may still be sending) when the request or an error says so.
#pragma once

#include <string>

#include "http/server.h"

namespace cadre::http {

struct ConnectionContext {
  const ServerLimits& limits;
  const Server::Handler& handler;
  const ErrorPage& errors;
  int stop_fd;  // readable once the server stops
  std::string peer;              // the connection's address
  ClientSlots* clients;          // set when the peer is a trusted proxy: each request takes a slot
  bool proxy_header = false;     // the connection begins with a PROXY protocol header (trusted peer)
};

// Serves `fd` until it closes; closes it.
void serve_connection(int fd, const ConnectionContext& context);

}  // namespace cadre::http
