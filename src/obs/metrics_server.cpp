// /metrics over Cadre's HTTP server (see metrics_server.h).
#include "obs/metrics_server.h"

#include "core/error.h"
#include "core/log.h"
#include "http/server.h"

namespace cadre::obs {
namespace {

// A scraper sends one small GET every few seconds: tight limits cost it nothing.
http::ServerLimits scrape_limits() {
  http::ServerLimits l;
  l.parser.max_header_bytes = 16 * 1024;
  l.parser.max_body_bytes = 64 * 1024;
  l.header_timeout_s = l.body_timeout_s = l.send_timeout_s = 5;
  l.idle_timeout_s = 30;
  l.max_connections = 64;
  return l;
}

void answer(const std::function<std::string()>& render, const http::Request& req, http::Response& res) {
  if (req.method != "GET" && req.method != "HEAD")
    return (void)res.send(405, "text/plain", str("cadre: method ", req.method, " not allowed; GET /metrics\n"),
                          {{"Allow", "GET, HEAD"}});
  if (req.path != "/metrics")
    return (void)res.send(404, "text/plain", str("cadre: no such path '", req.path, "'; metrics are at /metrics\n"));
  try {
    res.send(200, "text/plain; version=0.0.4; charset=utf-8", render());
  } catch (const std::exception& e) {
    log::warn(str("metrics: rendering failed: ", e.what()));
    res.send(500, "text/plain", str("cadre: rendering metrics failed: ", e.what(), "\n"));
  }
}

}  // namespace

MetricsServer::MetricsServer(const std::string& addr, int port, std::function<std::string()> render)
    : server_(std::make_unique<http::Server>(
          scrape_limits(),
          [render = std::move(render)](const http::Request& req, http::Response& res) { answer(render, req, res); },
          http::ErrorPage{"text/plain", [](int status, const std::string& message, const http::Request*) {
                            return str("cadre: ", status, ": ", message, "\n");
                          },
                          nullptr})),
      addr_(addr) {
  server_->bind(addr, port, "--metrics-port");
  port_ = server_->port();
  thread_ = std::thread([this] { server_->run(); });
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
