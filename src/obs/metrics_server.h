// The agent's HTTP endpoint: GET /metrics answers Prometheus text exposition produced on demand
// by a callback; anything else is a 404 (or 405 for other methods). Runs on its own thread.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

namespace cadre::http {
class Server;
}

namespace cadre::obs {

class MetricsServer {
 public:
  // Binds addr:port (port 0: any free port) or throws cadre::Error naming the address.
  MetricsServer(const std::string& addr, int port, std::function<std::string()> render);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const { return port_; }
  std::string url() const;  // http://addr:port/metrics

 private:
  std::unique_ptr<http::Server> server_;
  std::string addr_;
  int port_ = 0;
  std::thread thread_;
};

}  // namespace cadre::obs
