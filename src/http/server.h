// Cadre's HTTP/1.1 server: a listening socket, one thread per connection under a cap, and
// deadlines on everything a client controls. A connection over the cap is answered 503 with
// Retry-After by the accepting thread itself (no thread is started for it), one over the cap per
// client address 429 with Retry-After (the client behind a trusted proxy: its requests in
// flight count under the X-Forwarded-For address, http/trusted_proxies.h, or the PROXY
// protocol's, http/proxy_protocol.h); a request's head
// must arrive within the header timeout (slowloris), its body within the body timeout, the next
// request on a kept-alive connection within the idle timeout, and each write of an answer
// within the send timeout. Requests on one connection are answered in order (pipelining).
// Errors the server answers itself (400, 408, 413, 414, 431, 501, 503, 505, and 500 when a
// handler throws) get their body from the ErrorPage, so each user keeps its own error shape.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "http/request.h"
#include "http/request_parser.h"
#include "http/response.h"
#include "http/trusted_proxies.h"

namespace cadre::http {

struct ServerLimits {
  ParserLimits parser;
  double header_timeout_s = 30;  // accept (or a later request's first byte) to the end of its head
  double body_timeout_s = 60;    // end of the head to the end of the body
  double idle_timeout_s = 30;    // a kept-alive connection waiting for its next request
  double send_timeout_s = 30;    // each write of an answer
  int max_connections = 256;
  int max_connections_per_client = 64;  // by client address (429 beyond it); 0: no such cap
  // Peers whose X-Forwarded-For names the client: their connections are not capped per address;
  // each request counts, while it runs, under the client it stands for.
  TrustedProxies trusted_proxies;
  // Trusted proxies' connections begin with a PROXY protocol header (http/proxy_protocol.h),
  // whose source address is the client; one without it is answered 400 and closed.
  bool proxy_protocol = false;
};

// Places per client, taken for a request from a trusted proxy once its head has arrived.
class ClientSlots {
 public:
  virtual ~ClientSlots() = default;
  virtual bool acquire(const std::string& client) = 0;  // false: the client is at its cap
  virtual void release(const std::string& client) = 0;
};

struct ErrorPage {
  std::string content_type = "text/plain; charset=utf-8";
  // The body for an error the server answers itself; `request` is null when none was parsed.
  std::function<std::string(int status, const std::string& message, const Request* request)> body;
  // Called once per error the server answers itself, refused connections (503) included, from
  // the thread that answers it: for counting.
  std::function<void(int status, const Request* request)> answered;
};

class Server {
 public:
  using Handler = std::function<void(const Request&, Response&)>;

  Server(ServerLimits limits, Handler handler, ErrorPage errors);
  ~Server();  // stops and waits for the connections
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Listens on host:port (port 0: any free port) with the system's largest backlog; ConfigError
  // naming the address when it cannot. `what` names the setting in that message (e.g. "--port").
  void bind(const std::string& host, int port, const std::string& what);
  int port() const;
  // Accepts until stop(), then waits until every connection has ended: a request being
  // answered completes, idle connections close.
  void run();
  void stop();  // from any thread
  int open_connections() const;

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cadre::http
