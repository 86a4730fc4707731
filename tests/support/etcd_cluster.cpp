// Starting and stopping etcd members for tests (see etcd_cluster.h).
#include "core/file_util.h"
#include "support/etcd_cluster.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>

#include <httplib.h>

#include "support/process.h"

extern char** environ;

namespace cadre::test {
namespace {

// A port the kernel just handed out on host (ephemeral range: never etcd's 2379/2380).
int free_port(const std::string& host) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  ::inet_pton(AF_INET, host.c_str(), &addr.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    throw std::runtime_error("etcd test cluster: cannot bind a port on " + host + ": " + std::strerror(errno));
  }
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

}  // namespace

EtcdCluster::EtcdCluster(int members, const std::string& listen_host)
    : EtcdCluster(EtcdClusterOptions{members, std::vector<std::string>(members, listen_host), nullptr, false, false}) {}

EtcdCluster::EtcdCluster(const EtcdClusterOptions& options)
    : tls_(options.tls || options.client_cert_auth), client_cert_auth_(options.client_cert_auth) {
  const int members = options.members;
  std::string tmpl = (std::filesystem::temp_directory_path() / "cadre-etcd-XXXXXX").string();
  if (!::mkdtemp(tmpl.data())) throw std::runtime_error("etcd test cluster: mkdtemp failed");
  dir_ = tmpl;
  std::string initial;
  for (int i = 0; i < members; ++i) {
    Member m;
    m.name = "m" + std::to_string(i);
    m.host = i < static_cast<int>(options.hosts.size()) ? options.hosts[i] : "127.0.0.1";
    m.client_port = free_port(m.host);
    m.peer_port = free_port(m.host);
    while (m.peer_port == m.client_port) m.peer_port = free_port(m.host);
    initial += (i ? "," : "") + m.name + "=http://" + m.host + ":" + std::to_string(m.peer_port);
    members_.push_back(m);
  }
  if (tls_) make_certificates();
  // The environment without ETCD_*/ETCDCTL_* (etcd would take them as flags).
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e)
    if (std::strncmp(*e, "ETCD", 4) != 0) env_strings.push_back(*e);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  // One token for the whole cluster (members with different tokens refuse each other).
  const std::string token = "cadre-test-" + std::to_string(::getpid()) + "-" + std::to_string(members_[0].client_port);
  for (size_t i = 0; i < members_.size(); ++i) {
    Member& m = members_[i];
    std::string client = (tls_ ? "https://" : "http://") + m.host + ":" + std::to_string(m.client_port);
    std::string peer = "http://" + m.host + ":" + std::to_string(m.peer_port);
    std::vector<std::string> args;
    if (options.command_prefix) args = options.command_prefix(static_cast<int>(i));
    args.insert(args.end(), {
        "etcd", "--name", m.name, "--data-dir", dir_ + "/" + m.name, "--listen-client-urls", client,
        "--advertise-client-urls", client, "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
        "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token",
        token,
        // Fast elections: a killed leader is replaced in about a second.
        "--heartbeat-interval", "50", "--election-timeout", "500", "--logger", "zap", "--log-level", "warn"});
    if (tls_) args.insert(args.end(), {"--cert-file", dir_ + "/server.crt", "--key-file", dir_ + "/server.key"});
    if (client_cert_auth_) args.insert(args.end(), {"--client-cert-auth", "--trusted-ca-file", dir_ + "/ca.crt"});
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::string log_path = dir_ + "/" + m.name + ".log";
    pid_t parent = ::getpid();
    m.pid = ::fork();
    if (m.pid < 0) throw std::runtime_error("etcd test cluster: fork failed");
    if (m.pid == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);  // the test died without its destructor: take etcd along
      if (::getppid() != parent) ::_exit(1);
      ::setpgid(0, 0);
      int fd = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execvpe(argv[0], argv.data(), envp.data());
      ::_exit(127);
    }
  }
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  for (int i = 0; i < size(); ++i) {
    while (!healthy(i)) {
      int status = 0;
      bool exited = ::waitpid(members_[i].pid, &status, WNOHANG) == members_[i].pid;
      if (exited) members_[i].pid = -1;
      if (exited || std::chrono::steady_clock::now() > deadline) {
        std::string text = logs();
        stop();
        throw std::runtime_error("etcd test cluster did not come up (is etcd-server installed?):\n" + text);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

EtcdCluster::~EtcdCluster() { stop(); }

void EtcdCluster::stop() {
  for (int i = 0; i < size(); ++i) kill(i);
  std::error_code ignored;
  if (!dir_.empty()) cadre::remove_tree(dir_, ignored);
  dir_.clear();
}

// A CA and one server certificate for every member address, valid for a day.
void EtcdCluster::make_certificates() {
  std::string san = "subjectAltName=DNS:localhost";
  for (const auto& m : members_) san += ",IP:" + m.host;
  std::ofstream(dir_ + "/ext") << san << "\n";
  auto openssl = [&](std::vector<std::string> args) {
    args.insert(args.begin(), "openssl");
    RunResult r = run_process(args, {}, 60);
    if (r.exit_code != 0) throw std::runtime_error("etcd test cluster: openssl failed: " + r.output);
  };
  const std::string d = dir_ + "/";
  openssl({"req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "ca.key", "-out", d + "ca.crt", "-days",
           "1", "-subj", "/CN=cadre-test-ca"});
  openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "server.key", "-out", d + "server.csr", "-subj",
           "/CN=cadre-test-etcd"});
  openssl({"x509", "-req", "-in", d + "server.csr", "-CA", d + "ca.crt", "-CAkey", d + "ca.key", "-CAcreateserial",
           "-out", d + "server.crt", "-days", "1", "-extfile", d + "ext"});
  if (!client_cert_auth_) return;
  std::ofstream(d + "client-ext") << "extendedKeyUsage=clientAuth\n";
  openssl({"req", "-newkey", "rsa:2048", "-nodes", "-keyout", d + "client.key", "-out", d + "client.csr", "-subj",
           "/CN=cadre-test-client"});
  openssl({"x509", "-req", "-in", d + "client.csr", "-CA", d + "ca.crt", "-CAkey", d + "ca.key", "-CAcreateserial",
           "-out", d + "client.crt", "-days", "1", "-extfile", d + "client-ext"});
}

std::string EtcdCluster::client_cert_file() const { return client_cert_auth_ ? dir_ + "/client.crt" : ""; }
std::string EtcdCluster::client_key_file() const { return client_cert_auth_ ? dir_ + "/client.key" : ""; }

std::string EtcdCluster::ca_file() const { return tls_ ? dir_ + "/ca.crt" : ""; }

// A client of member i (https with the test CA when TLS is on).
static std::unique_ptr<httplib::Client> member_client(const std::string& host, int port, bool tls,
                                                      const std::string& ca, const std::string& cert = "",
                                                      const std::string& key = "") {
  std::unique_ptr<httplib::Client> c;
  if (tls) {
    c = std::make_unique<httplib::Client>("https://" + host + ":" + std::to_string(port), cert, key);
    c->set_ca_cert_path(ca);
    c->enable_server_certificate_verification(true);
  } else {
    c = std::make_unique<httplib::Client>(host, port);
  }
  c->set_connection_timeout(std::chrono::milliseconds(500));
  c->set_read_timeout(std::chrono::seconds(2));
  return c;
}

bool EtcdCluster::healthy(int i) const {
  auto client_ptr = member_client(members_[i].host, members_[i].client_port, tls_, ca_file(), client_cert_file(),
                              client_key_file());
  httplib::Client& client = *client_ptr;
  auto res = client.Get("/health");
  return res && res->status == 200 && res->body.find("\"true\"") != std::string::npos;
}

void EtcdCluster::enable_auth(const std::string& user, const std::string& password) const {
  for (std::vector<std::string> args : {std::vector<std::string>{"user", "add", user + ":" + password},
                                        std::vector<std::string>{"user", "grant-role", user, "root"},
                                        std::vector<std::string>{"auth", "enable"}}) {
    std::vector<std::string> argv = {"etcdctl", "--endpoints", endpoints()};
    argv.insert(argv.end(), args.begin(), args.end());
    auto r = run_process(argv, {"ETCDCTL_API=3"}, 30);
    if (r.exit_code != 0) throw std::runtime_error("etcdctl " + args[0] + " " + args[1] + " failed: " + r.output);
  }
}

int EtcdCluster::leader() const {
  for (int i = 0; i < size(); ++i) {
    if (members_[i].pid <= 0) continue;
    auto client = member_client(members_[i].host, members_[i].client_port, tls_, ca_file(), client_cert_file(),
                              client_key_file());
    auto res = client->Post("/v3/maintenance/status", "{}", "application/json");
    if (!res || res->status != 200) continue;
    // {"header":{"member_id":"..."},"leader":"..."}: ids are JSON strings; compare them as text.
    auto field = [&](const std::string& body, const std::string& name, size_t from) {
      auto at = body.find("\"" + name + "\":\"", from);
      if (at == std::string::npos) return std::string();
      at += name.size() + 4;
      return body.substr(at, body.find('"', at) - at);
    };
    std::string id = field(res->body, "member_id", 0), leader = field(res->body, "leader", 0);
    if (!id.empty() && id == leader) return i;
  }
  return -1;
}

std::string EtcdCluster::endpoint(int i) const {
  return (tls_ ? "https://" : "") + members_[i].host + ":" + std::to_string(members_[i].client_port);
}

std::string EtcdCluster::endpoints() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += (i ? "," : "") + endpoint(i);
  return out;
}

void EtcdCluster::kill(int i) {
  Member& m = members_[i];
  if (m.pid <= 0) return;
  ::kill(m.pid, SIGKILL);
  int status = 0;
  ::waitpid(m.pid, &status, 0);
  m.pid = -1;
}

std::string EtcdCluster::log(int i) const { return read_all(dir_ + "/" + members_[i].name + ".log"); }

std::string EtcdCluster::logs() const {
  std::string out;
  for (int i = 0; i < size(); ++i) out += "--- etcd member " + members_[i].name + " ---\n" + log(i);
  return out;
}

}  // namespace cadre::test
