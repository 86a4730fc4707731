// /metrics over cpp-httplib (see metrics_server.h).
#include "obs/metrics_server.h"

#include <httplib.h>

#include "core/error.h"
#include "core/log.h"

namespace cadre::obs {

MetricsServer::MetricsServer(const std::string& addr, int port, std::function<std::string()> render)
    : server_(std::make_unique<httplib::Server>()), addr_(addr) {
  server_->Get("/metrics", [render](const httplib::Request&, httplib::Response& res) {
    try {
      res.set_content(render(), "text/plain; version=0.0.4; charset=utf-8");
    } catch (const std::exception& e) {
      res.status = 500;
      res.set_content(str("cadre: rendering metrics failed: ", e.what(), "\n"), "text/plain");
      log::warn(str("metrics: rendering failed: ", e.what()));
    }
  });
  server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404)
      res.set_content(str("cadre: no such path '", req.path, "'; metrics are at /metrics\n"), "text/plain");
  });
  // Requests other than GET/HEAD on any path.
  auto not_allowed = [](const httplib::Request& req, httplib::Response& res) {
    res.status = 405;
    res.set_header("Allow", "GET");
    res.set_content(str("cadre: method ", req.method, " not allowed; GET /metrics\n"), "text/plain");
  };
  server_->Post(".*", not_allowed);
  server_->Put(".*", not_allowed);
  server_->Delete(".*", not_allowed);
  server_->Patch(".*", not_allowed);
  server_->set_read_timeout(5, 0);
  server_->set_write_timeout(5, 0);
  bool bound = port == 0 ? (port_ = server_->bind_to_any_port(addr)) > 0
                         : (port_ = port, server_->bind_to_port(addr, port));
  CADRE_CONFIG_CHECK(bound, "--metrics-port: cannot listen on ", addr, ":", port,
                     " (in use, or not an address of this machine)");
  thread_ = std::thread([this] { server_->listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  server_->stop();
  if (thread_.joinable()) thread_.join();
}

std::string MetricsServer::url() const {
  const bool v6 = addr_.find(':') != std::string::npos;
  return str("http://", v6 ? "[" + addr_ + "]" : addr_, ":", port_, "/metrics");
}

}  // namespace cadre::obs
