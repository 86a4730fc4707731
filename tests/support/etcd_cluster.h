// Real etcd for tests: starts 1..N etcd members as child processes on free loopback ports (never
// 2379/2380, where a system etcd may listen), each with a temp --data-dir and a scrubbed
// environment (etcd reads ETCD_* variables as flags), waits until every member serves, and
// SIGKILLs and reaps them in the destructor, so a failing test never leaves etcd behind (the
// members also get PR_SET_PDEATHSIG). Reusable by any test that needs etcd, e.g. fault tests:
//   cadre::test::EtcdCluster etcd(3);
//   run ... --rdzv-backend etcd --rdzv-endpoint etcd.endpoints() ...
//   etcd.kill(0);   // SIGKILL one member; the other two keep a quorum
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace cadre::test {

class EtcdCluster {
 public:
  // Throws std::runtime_error (with the members' logs) when the cluster is not up within 30 s.
  // listen_host: the address members listen on (e.g. a namespace's address; default loopback).
  explicit EtcdCluster(int members = 1, const std::string& listen_host = "127.0.0.1");
  ~EtcdCluster();
  EtcdCluster(const EtcdCluster&) = delete;
  EtcdCluster& operator=(const EtcdCluster&) = delete;

  int size() const { return static_cast<int>(members_.size()); }
  std::string endpoint(int i) const;   // "host:port" of member i's client URL
  std::string endpoints() const;       // all of them, comma-separated (for --rdzv-endpoint)
  void kill(int i);                    // SIGKILL member i and reap it
  int leader() const;                  // index of the current raft leader, -1 if none answers
  bool alive(int i) const { return members_[i].pid > 0; }
  std::string log(int i) const;        // member i's output
  std::string logs() const;            // every member's output, for failure messages
  const std::string& dir() const { return dir_; }

 private:
  struct Member {
    std::string name;
    int client_port = 0, peer_port = 0;
    pid_t pid = -1;
  };
  bool healthy(int i) const;
  void stop();  // kill every member, remove the data dirs

  std::string host_, dir_;
  std::vector<Member> members_;
};

}  // namespace cadre::test
