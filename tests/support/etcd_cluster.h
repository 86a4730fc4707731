// Real etcd for tests: starts 1..N etcd members as child processes on free loopback ports (never
// 2379/2380, where a system etcd may listen), each with a temp --data-dir and a scrubbed
// environment (etcd reads ETCD_* variables as flags), waits until every member serves, and
// SIGKILLs and reaps them in the destructor, so a failing test never leaves etcd behind (the
// members also get PR_SET_PDEATHSIG). Reusable by any test that needs etcd, e.g. fault tests:
//   cadre::test::EtcdCluster etcd(3);
//   run ... --rdzv-backend etcd --rdzv-endpoint etcd.endpoints() ...
//   etcd.kill(etcd.leader());   // SIGKILL the leader; the other two keep a quorum
// Members may listen on different addresses and run under a command prefix (e.g. inside a
// network namespace: {"ip", "netns", "exec", "h1"}), and may serve clients over https with a
// throwaway CA (pass ca_file() as --rdzv-conf cacert=). The process that constructs the cluster
// must reach every member's client address: it waits for each /health to say true.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace cadre::test {

struct EtcdClusterOptions {
  int members = 1;
  std::vector<std::string> hosts;  // member i listens on hosts[i] (IPv4); default 127.0.0.1
  // Words put before `etcd` for member i, e.g. {"ip", "netns", "exec", "h1"}; none by default.
  std::function<std::vector<std::string>(int member)> command_prefix;
  bool tls = false;                // clients speak https (a CA is made with the openssl CLI)
  bool client_cert_auth = false;   // with tls: members demand a client certificate from the CA
};

class EtcdCluster {
 public:
  // Throws std::runtime_error (with the members' logs) when the cluster is not up within 30 s.
  // listen_host: the address every member listens on (default loopback).
  explicit EtcdCluster(int members = 1, const std::string& listen_host = "127.0.0.1");
  explicit EtcdCluster(const EtcdClusterOptions& options);
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  std::string endpoint(int i) const;   // member i's client address: "host:port" ("https://host:port" with TLS)
  std::string endpoints() const;       // all of them, comma-separated (for --rdzv-endpoint)
  std::string ca_file() const;         // with TLS: the CA that signed the members' certificates
  std::string client_cert_file() const;  // with client_cert_auth: a client certificate and its key
  std::string client_key_file() const;
  void kill(int i);                    // SIGKILL member i and reap it
  int leader() const;                  // index of the current raft leader, -1 if none answers
  // Adds `user` with `password` and the root role, and turns authentication on (etcdctl).
  // Throws std::runtime_error with etcdctl's output when a step fails.
  void enable_auth(const std::string& user, const std::string& password) const;
  bool alive(int i) const { return members_[i].pid > 0; }
  std::string log(int i) const;        // member i's output
  std::string logs() const;            // every member's output, for failure messages
  const std::string& dir() const { return dir_; }

 private:
  struct Member {
    std::string name, host;
    int client_port = 0, peer_port = 0;
    pid_t pid = -1;
  };
  bool healthy(int i) const;
  void make_certificates();
  void stop();  // kill every member, remove the data dirs

  bool tls_ = false, client_cert_auth_ = false;
  std::string dir_;
  std::vector<Member> members_;
};

}  // namespace cadre::test
