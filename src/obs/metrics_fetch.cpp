// HTTP GET of metrics (see metrics_fetch.h).
#include "obs/metrics_fetch.h"

#include <httplib.h>

#include <cstdlib>

#include "core/error.h"

namespace cadre::obs {

std::string MetricsUrl::text() const {
  const bool v6 = host.find(':') != std::string::npos;
  return str("http://", v6 ? "[" + host + "]" : host, ":", port, path);
}

MetricsUrl metrics_url_parse(const std::string& text) {
  std::string rest = text;
  if (rest.rfind("http://", 0) == 0) rest = rest.substr(7);
  CADRE_CONFIG_CHECK(rest.rfind("https://", 0) != 0, "'", text, "': https is not supported (agents serve plain http)");
  MetricsUrl url;
  auto slash = rest.find('/');
  if (slash != std::string::npos) {
    url.path = rest.substr(slash);
    rest = rest.substr(0, slash);
  }
  std::string port;
  if (!rest.empty() && rest[0] == '[') {
    auto close = rest.find(']');
    CADRE_CONFIG_CHECK(close != std::string::npos, "'", text, "': unterminated [IPv6 address]");
    url.host = rest.substr(1, close - 1);
    if (close + 1 < rest.size() && rest[close + 1] == ':') port = rest.substr(close + 2);
  } else {
    auto colon = rest.rfind(':');
    CADRE_CONFIG_CHECK(colon != std::string::npos, "'", text, "': expected host:port or http://host:port/metrics");
    url.host = rest.substr(0, colon);
    port = rest.substr(colon + 1);
  }
  char* end = nullptr;
  long p = std::strtol(port.c_str(), &end, 10);
  CADRE_CONFIG_CHECK(!url.host.empty() && !port.empty() && end && *end == 0 && p > 0 && p < 65536, "'", text,
                     "': expected host:port with a port in 1..65535");
  url.port = int(p);
  return url;
}

std::string metrics_fetch(const MetricsUrl& url, double timeout_s) {
  httplib::Client client(url.host, url.port);
  const time_t sec = time_t(timeout_s);
  const time_t usec = time_t((timeout_s - double(sec)) * 1e6);
  client.set_connection_timeout(sec, usec);
  client.set_read_timeout(sec, usec);
  auto res = client.Get(url.path.c_str());
  if (!res) throw Error(str(url.text(), ": ", httplib::to_string(res.error())));
  if (res->status != 200) throw Error(str(url.text(), ": HTTP ", res->status, ": ", res->body.substr(0, 200)));
  return res->body;
}

}  // namespace cadre::obs
