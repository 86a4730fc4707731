// Embedded store backend over c10d::TCPStore. The only file that includes c10d headers (they cost
// ~6 s of compile time each); everything else sees the KvStore interface.
#include "rdzv/tcp_store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <condition_variable>
#include <mutex>
#include <thread>

#include "core/error.h"

namespace cadre::rdzv {
namespace {

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

class TcpStore : public KvStore {
 public:
  TcpStore(const std::string& host, uint16_t port, bool is_server, std::chrono::milliseconds timeout)
      : where_(host + ":" + std::to_string(port)) {
    c10d::TCPStoreOptions opts;
    opts.port = port;
    opts.isServer = is_server;
    opts.waitWorkers = false;
    opts.timeout = timeout;
    store_ = std::make_unique<c10d::TCPStore>(host, opts);
    if (is_server) where_ = host + ":" + std::to_string(store_->getPort());
  }

  void set(const std::string& key, const std::string& value) override {
    guard("set", key, [&] { store_->set(key, bytes(value)); });
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::optional<std::string> out;
    guard("get", key, [&] {
      if (store_->check({key})) out = text(store_->get(key));
    });
    return out;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    guard("add", key, [&] { out = store_->add(key, delta); });
    return out;
  }
  std::string compare_set(const std::string& key, const std::string& expected,
                          const std::string& desired) override {
    std::string out;
    guard("compare_set", key, [&] { out = text(store_->compareSet(key, bytes(expected), bytes(desired))); });
    return out;
  }
  std::string describe() const override { return where_; }
  uint16_t port() const { return store_->getPort(); }

 private:
  // c10d reports lost connections and timeouts as c10::Error / std::runtime_error: rethrow them as
  // cadre::Error saying which store, operation and key were involved.
  template <typename Fn>
  void guard(const char* op, const std::string& key, Fn&& fn) {
    try {
      fn();
    } catch (const std::exception& e) {
      throw Error(str("rendezvous store ", where_, ": ", op, "(", key, ") failed: ", first_line(e.what()),
                      " (is the agent hosting the store still running?)"));
    }
  }
  static std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

  std::string where_;
  std::unique_ptr<c10d::TCPStore> store_;
};

}  // namespace

std::unique_ptr<KvStore> tcp_store_host(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  try {
    return std::make_unique<TcpStore>(host, port, true, timeout);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw Error(str("cannot host the rendezvous store on ", host, ":", port, ": ", what.substr(0, what.find('\n'))));
  }
}

std::unique_ptr<KvStore> tcp_store_connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout) {
  // c10d's client has no receive timeout: a program that accepts the connection but never answers
  // would block us forever. Connect and make one round trip on a helper thread, with a deadline.
  struct Attempt {
    std::mutex mutex;
    std::condition_variable done;
    std::unique_ptr<TcpStore> store;
    std::string error;
    bool finished = false;
  };
  auto attempt = std::make_shared<Attempt>();
  std::thread([attempt, host, port, timeout] {
    std::unique_ptr<TcpStore> store;
    std::string error;
    try {
      store = std::make_unique<TcpStore>(host, port, false, timeout);
      // One get, not just an add: c10d 1.13 sets the client socket's receive timeout (to the
      // store timeout) inside get() and keeps it. Without it, an op on a store whose host became
      // unreachable (cable cut, partition) blocks forever; with it, the op fails after the
      // timeout and the agent exits with an error naming the store (tests/netfault).
      store->add("cadre/probe", 0);
      store->try_get("cadre/probe");
    } catch (const std::exception& e) {
      error = e.what();
    }
    std::lock_guard<std::mutex> lock(attempt->mutex);
    attempt->store = std::move(store);
    attempt->error = error;
    attempt->finished = true;
    attempt->done.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(attempt->mutex);
  bool finished = attempt->done.wait_for(lock, timeout + std::chrono::seconds(1), [&] { return attempt->finished; });
  if (!finished)
    throw Error(str("the program listening on ", host, ":", port, " did not answer as a rendezvous store within ",
                    timeout.count(), " ms (port in use by something else? is the hosting agent alive?)"));
  if (!attempt->store)
    throw Error(str("cannot reach the rendezvous store at ", host, ":", port, " within ", timeout.count(),
                    " ms: ", attempt->error.substr(0, attempt->error.find('\n'))));
  return std::move(attempt->store);
}

uint16_t tcp_store_port(const KvStore& store) {
  auto* tcp = dynamic_cast<const TcpStore*>(&store);
  return tcp ? tcp->port() : 0;
}

}  // namespace cadre::rdzv
