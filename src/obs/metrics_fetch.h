// GET of an agent's /metrics (or any Prometheus endpoint) for `cadre top`.
#pragma once

#include <string>

namespace cadre::obs {

// "http://host:port/path", "host:port" (path /metrics) or "http://host:port" (path /metrics).
struct MetricsUrl {
  std::string host;
  int port = 0;
  std::string path = "/metrics";
  std::string text() const;  // http://host:port/path
};
// Throws cadre::ConfigError naming the text when it is not such a URL.
MetricsUrl metrics_url_parse(const std::string& text);

// The body of a 200 answer; cadre::Error naming the URL and what went wrong otherwise.
std::string metrics_fetch(const MetricsUrl& url, double timeout_s = 2);

}  // namespace cadre::obs
