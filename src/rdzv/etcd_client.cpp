// etcd v3 JSON gateway client (see etcd_client.h). The only file that includes cpp-httplib.
#include "rdzv/etcd_client.h"

#include <httplib.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"

namespace cadre::rdzv {
namespace {

using json = nlohmann::json;

// Bound on one answer (or one watch line) read from an endpoint.
constexpr size_t kMaxAnswerBytes = 64u << 20;

void set_timeout(httplib::Client& client, double seconds) {
  auto us = std::chrono::microseconds(static_cast<int64_t>(std::max(seconds, 0.001) * 1e6));
  client.set_read_timeout(us);
  client.set_write_timeout(us);
  client.set_connection_timeout(std::chrono::microseconds(std::min<int64_t>(us.count(), 1000000)));
}

// A member that closes the connection while we write (killed, or refusing a TLS client) raises
// SIGPIPE in the writing thread; OpenSSL's writes do not ask the kernel to suppress it. Block it
// in this thread for the duration of a request and discard it afterwards, so a library call
// never kills the process, whatever the program's own SIGPIPE disposition.
class SigpipeBlock {
 public:
  SigpipeBlock() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
  }
  ~SigpipeBlock() {
    timespec zero{0, 0};
    sigset_t pending;
    sigpending(&pending);
    if (sigismember(&pending, SIGPIPE) && !sigismember(&old_, SIGPIPE)) sigtimedwait(&pipe_, nullptr, &zero);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SigpipeBlock(const SigpipeBlock&) = delete;
  SigpipeBlock& operator=(const SigpipeBlock&) = delete;

 private:
  sigset_t pipe_, old_;
};

// One HTTP(S) connection to one endpoint, with the TLS settings applied.
std::unique_ptr<httplib::Client> make_client(const EtcdOptions& o, const Endpoint& e, double timeout_s) {
  std::unique_ptr<httplib::Client> client;
  if (o.tls) {
    client = std::make_unique<httplib::Client>("https://" + e.str(), o.cert_file, o.key_file);
    if (!o.ca_file.empty()) client->set_ca_cert_path(o.ca_file);
    client->enable_server_certificate_verification(true);
  } else {
    client = std::make_unique<httplib::Client>(e.host, e.port);
  }
  set_timeout(*client, timeout_s);
  return client;
}

// cpp-httplib's error names ("Connection", "Read") say little on their own.
std::string transport_error(httplib::Error e) {
  switch (e) {
    case httplib::Error::Connection: return "cannot connect (refused or unreachable)";
    case httplib::Error::ConnectionTimeout: return "connect timed out";
    case httplib::Error::Read: return "no answer (read timed out or connection closed)";
    case httplib::Error::Write: return "sending the request failed";
    case httplib::Error::SSLConnection: return "TLS handshake failed (is it an https endpoint?)";
    case httplib::Error::SSLLoadingCerts: return "cannot load the TLS CA or client certificate files";
    case httplib::Error::SSLServerVerification:
      return "the server's TLS certificate did not verify (wrong --rdzv-conf cacert?)";
    default: return "HTTP error: " + httplib::to_string(e);
  }
}

// gRPC status codes that mean "this member cannot serve right now; another may".
bool retryable_code(int code) {
  return code == 14 /*UNAVAILABLE*/ || code == 4 /*DEADLINE_EXCEEDED*/ || code == 10 /*ABORTED*/;
}

bool auth_token_rejected(const std::string& message) {
  return message.find("invalid auth token") != std::string::npos;
}

}  // namespace

std::string etcd_prefix_end(const std::string& prefix) {
  std::string end = prefix;
  while (!end.empty()) {
    if (uint8_t(end.back()) < 0xff) {
      end.back() = char(uint8_t(end.back()) + 1);
      return end;
    }
    end.pop_back();
  }
  return std::string(1, '\0');  // every key
}

std::vector<Endpoint> etcd_endpoints_parse(const std::string& text, bool* tls) {
  std::vector<Endpoint> out;
  int https = -1;  // unknown until an item names a scheme
  size_t start = 0;
  while (start <= text.size()) {
    size_t comma = text.find(',', start);
    std::string item = text.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    start = comma == std::string::npos ? text.size() + 1 : comma + 1;
    CADRE_CONFIG_CHECK(!item.empty(), "--rdzv-endpoint '", text, "': empty endpoint in the list (expected host:port,host:port)");
    int scheme = item.rfind("https://", 0) == 0 ? 1 : item.rfind("http://", 0) == 0 ? 0 : -1;
    if (scheme >= 0) {
      CADRE_CONFIG_CHECK(https < 0 || https == scheme, "--rdzv-endpoint '", text,
                         "': mixes http:// and https:// endpoints; use one scheme for the whole cluster");
      https = scheme;
      item = item.substr(scheme ? 8 : 7);
    }
    CADRE_CONFIG_CHECK(item.find('/') == std::string::npos, "--rdzv-endpoint '", item,
                       "': expected host:port (no path)");
    Endpoint e = endpoint_parse(item, 2379);
    CADRE_CONFIG_CHECK(e.port != 0, "--rdzv-endpoint '", item, "': port 0 is not an etcd client port");
    out.push_back(e);
  }
  if (tls) *tls = https == 1;
  return out;
}

struct EtcdClient::Attempt {
  int status = -1;          // HTTP status, -1 on a transport error
  std::string body, error;  // error: transport failure text
  bool fatal = false;       // retrying cannot help (TLS certificates that do not verify or load)
};

EtcdClient::EtcdClient(EtcdOptions options) : options_(std::move(options)) {
  CADRE_CONFIG_CHECK(!options_.endpoints.empty(), "etcd: no endpoints given");
  CADRE_CONFIG_CHECK(options_.cert_file.empty() == options_.key_file.empty(),
                     "etcd: a TLS client certificate needs both cert and key files");
  CADRE_CONFIG_CHECK(options_.user.empty() == options_.password.empty(),
                     "etcd: give both user and password (or neither); got only the ",
                     options_.user.empty() ? "password" : "user");
}

std::string EtcdClient::describe() const {
  std::string out = options_.tls ? "etcd https://" : "etcd ";
  for (size_t i = 0; i < options_.endpoints.size(); ++i) out += (i ? "," : "") + options_.endpoints[i].str();
  return out;
}

EtcdClient::Attempt EtcdClient::post_once(size_t endpoint, const std::string& path, const std::string& body,
                                          double timeout_s) {
  auto client = make_client(options_, options_.endpoints[endpoint], timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string auth = token();
  if (!auth.empty()) req.set_header("Authorization", auth);
  // The gateway sends error answers chunked with a trailer, which cpp-httplib 0.11 reports as a
  // read error after the body arrived. Take the body as it streams and stop once it is whole.
  Attempt a;
  int status = -1;
  bool complete = false;
  req.response_handler = [&](const httplib::Response& r) {
    status = r.status;
    return true;
  };
  bool oversized = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    a.body.append(data, len);
    // Rendezvous reads single keys: an answer this large is not one etcd would send it.
    if (a.body.size() > kMaxAnswerBytes) {
      oversized = true;
      return false;
    }
    complete = json::accept(a.body);
    return !complete;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  {
    SigpipeBlock no_sigpipe;
    client->send(req, res, error);
  }
  if (oversized) {
    a.error = str("the answer exceeded ", kMaxAnswerBytes >> 20, " MiB; not an etcd answer to this request");
    return a;
  }
  if (complete || (error == httplib::Error::Success && status > 0)) {
    a.status = status;
    return a;
  }
  a.error = transport_error(error);
  // TLS 1.3 refuses a client certificate after the handshake: the next read or write fails.
  if (options_.tls && (error == httplib::Error::Read || error == httplib::Error::Write))
    a.error += " (over https this is also how a member refuses a missing or untrusted client certificate)";
  a.fatal = error == httplib::Error::SSLServerVerification || error == httplib::Error::SSLLoadingCerts;
  if (status > 0) a.error += str(" (HTTP ", status, ", partial answer '", a.body.substr(0, 200), "')");
  return a;
}

std::string EtcdClient::token() {
  std::lock_guard<std::mutex> lock(token_mutex_);
  return token_;
}

void EtcdClient::authenticate(size_t endpoint) {
  {
    std::lock_guard<std::mutex> lock(token_mutex_);
    token_.clear();
  }
  json body = {{"name", options_.user}, {"password", options_.password}};
  Attempt a = post_once(endpoint, "/v3/auth/authenticate", body.dump(), options_.request_timeout_s);
  const std::string where = options_.endpoints[endpoint].str();
  if (a.status < 0) throw Error(str("etcd ", where, ": authenticate: ", a.error));
  json answer = json::parse(a.body, nullptr, false);
  if (a.status != 200 || !answer.is_object() || !answer.contains("token") || !answer["token"].is_string()) {
    std::string message = etcd_error_of(answer, a.body.substr(0, 500)).message;
    throw Error(str("etcd ", where, ": authentication as user '", options_.user, "' failed: ", message));
  }
  std::lock_guard<std::mutex> lock(token_mutex_);
  token_ = answer["token"].get<std::string>();
}

json EtcdClient::call(const std::string& path, const json& body, const std::string& what) {
  const std::string text = body.dump();
  const double deadline = now_s() + options_.timeout_s;
  const size_t n = options_.endpoints.size();
  std::vector<std::string> errors(n);  // the latest error per endpoint
  std::string last_error;
  // Logs in at endpoint i; false (error recorded) when it cannot be reached; throws when the
  // credentials are refused.
  auto login = [&](size_t i) {
    try {
      authenticate(i);
      return true;
    } catch (const Error& e) {
      if (std::string(e.what()).find("authentication as user") != std::string::npos) throw;
      last_error = errors[i] = e.what();
      return false;
    }
  };
  for (int pass = 0;; ++pass) {
    size_t first = preferred_.load();
    for (size_t step = 0; step < n; ++step) {
      size_t i = (first + step) % n;
      const std::string where = options_.endpoints[i].str();
      double left = deadline - now_s();
      if (left <= 0 && pass > 0) break;
      double timeout = std::min(options_.request_timeout_s, std::max(left, 0.5));
      if (!options_.user.empty() && token().empty() && !login(i)) continue;
      Attempt a = post_once(i, "/v3/" + path, text, timeout);
      if (!options_.user.empty() && a.status > 0 && auth_token_rejected(a.body)) {
        // Simple tokens expire (after 5 idle minutes by default): log in again and repeat once.
        if (!login(i)) continue;
        a = post_once(i, "/v3/" + path, text, timeout);
      }
      if (a.status < 0) {
        if (a.fatal) throw Error(str("etcd ", where, ": ", what, ": ", a.error));
        last_error = errors[i] = str(where, ": ", a.error);
        continue;
      }
      json answer = json::parse(a.body, nullptr, false);
      if (answer.is_discarded())
        throw Error(str("etcd ", where, ": ", what, ": answer is not JSON (HTTP ", a.status, "): ", a.body.substr(0, 200)));
      if (a.status == 200 && !answer.contains("error")) {
        if (i != first || pass > 0)
          log::warn(str("etcd: ", options_.endpoints[first].str(), " did not answer (",
                        errors[first].empty() ? last_error : errors[first], "); now using ", where));
        preferred_ = i;
        return answer;
      }
      const EtcdErrorInfo info = etcd_error_of(answer, a.body.substr(0, 500));
      const std::string& message = info.message;
      const int code = info.code;
      if (retryable_code(code) || a.status == 503) {
        last_error = errors[i] = str(where, ": ", message);
        continue;
      }
      if (message.find("user name is empty") != std::string::npos)
        throw Error(str("etcd ", where, ": ", what, ": the cluster requires authentication; pass --rdzv-conf "
                        "user=NAME,password=SECRET or set CADRE_ETCD_USER and CADRE_ETCD_PASSWORD"));
      throw Error(str("etcd ", where, ": ", what, ": ", message, " (HTTP ", a.status, ", code ", code, ")"));
    }
    if (now_s() >= deadline) {
      std::string tried;
      for (size_t i = 0; i < n; ++i)
        tried += str(i ? "; " : "", options_.endpoints[i].str(), " (", errors[i].empty() ? "not tried" : errors[i], ")");
      throw Error(str("etcd: ", what, ": no endpoint answered within ", options_.timeout_s, " s; tried ", tried,
                      "; last error: ", last_error));
    }
    // Every endpoint failed this pass (e.g. a leader election): back off briefly, then go again.
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(100 * (pass + 1), 500)));
  }
}

std::optional<EtcdKv> EtcdClient::get(const std::string& key, int64_t* revision) {
  return etcd_range_first(call("kv/range", {{"key", base64_encode(key)}}, "get " + key), revision);
}

void EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  json body = {{"key", base64_encode(key)}, {"value", base64_encode(value)}};
  if (lease) body["lease"] = std::to_string(lease);
  call("kv/put", body, "put " + key);
}

void EtcdClient::erase_prefix(const std::string& prefix) {
  call("kv/deleterange", {{"key", base64_encode(prefix)}, {"range_end", base64_encode(etcd_prefix_end(prefix))}},
       "delete prefix " + prefix);
}

int64_t EtcdClient::lease_grant(int64_t ttl_s) {
  json answer = call("lease/grant", {{"TTL", std::to_string(ttl_s)}}, str("grant a lease of ", ttl_s, " s"));
  int64_t id = etcd_int_field(answer, "ID");
  CADRE_CHECK(id != 0, "etcd: lease grant returned no ID: ", answer.dump());
  return id;
}

int64_t EtcdClient::lease_keep_alive(int64_t id) {
  json answer = call("lease/keepalive", {{"ID", std::to_string(id)}}, str("keep lease ", id, " alive"));
  return etcd_keepalive_ttl(answer);
}

void EtcdClient::lease_revoke(int64_t id) {
  call("lease/revoke", {{"ID", std::to_string(id)}}, str("revoke lease ", id));
}

bool EtcdClient::watch_prefix(const std::string& prefix, int64_t start_revision, double timeout_s) {
  json create = {{"key", base64_encode(prefix)}, {"range_end", base64_encode(etcd_prefix_end(prefix))}};
  if (start_revision > 0) create["start_revision"] = std::to_string(start_revision);
  const std::string body = json{{"create_request", create}}.dump();
  const size_t i = preferred_.load() % options_.endpoints.size();
  auto client = make_client(options_, options_.endpoints[i], timeout_s);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v3/watch";
  req.body = body;
  req.set_header("Content-Type", "application/json");
  std::string auth = token();
  if (!auth.empty()) req.set_header("Authorization", auth);
  // The stream is one JSON object per line: first {"result":{"created":true}}, then events.
  std::string buffer;
  bool changed = false, failed = false;
  req.content_receiver = [&](const char* data, size_t len, uint64_t, uint64_t) {
    buffer.append(data, len);
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      const EtcdWatchLine line = etcd_watch_line(buffer.substr(0, nl));
      buffer.erase(0, nl + 1);
      if (line != EtcdWatchLine::Nothing) {
        failed = line == EtcdWatchLine::Failed;
        changed = true;
        return false;  // stop reading: the caller re-reads the store (and meets any error there)
      }
    }
    // A line longer than any answer etcd sends: give up on this watch, as on a failed one.
    if (buffer.size() > kMaxAnswerBytes) {
      failed = changed = true;
      return false;
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  double started = now_s();
  {
    SigpipeBlock no_sigpipe;
    client->send(req, res, error);
  }
  if (changed && !failed) return true;
  if (failed) {  // e.g. no permission to watch: pace the caller's re-reads instead of spinning
    std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.1, timeout_s)));
    return true;
  }
  if (error == httplib::Error::Read || error == httplib::Error::Success) return false;  // quiet until the timeout
  // The endpoint is gone: let the next call fail over, and report a (spurious) change so the
  // caller re-reads through call(), which handles failover and errors.
  preferred_ = (i + 1) % options_.endpoints.size();
  double spent = now_s() - started;
  if (spent < timeout_s) std::this_thread::sleep_for(std::chrono::duration<double>(std::min(0.1, timeout_s - spent)));
  return true;
}

}  // namespace cadre::rdzv
