// Embedded store backend: KvStore over the job store's client, plus its server when hosting.
#include "rdzv/tcp_store.h"

#include "core/error.h"
#include "core/log.h"
#include "store/client.h"
#include "store/server.h"

namespace cadre::rdzv {
namespace {

class TcpStore : public KvStore {
 public:
  TcpStore(std::unique_ptr<store::StoreServer> server, std::unique_ptr<store::StoreClient> client)
      : server_(std::move(server)), client_(std::move(client)) {}

  void set(const std::string& key, const std::string& value) override {
    guard([&] { client_->set(key, value); });
  }
  std::optional<std::string> try_get(const std::string& key) override {
    std::optional<std::string> out;
    guard([&] { out = client_->try_get(key); });
    return out;
  }
  int64_t add(const std::string& key, int64_t delta) override {
    int64_t out = 0;
    guard([&] { out = client_->add(key, delta); });
    return out;
  }
  std::string compare_set(const std::string& key, const std::string& expected, const std::string& desired) override {
    std::optional<std::string> out;
    guard([&] { out = client_->compare_set(key, expected, desired); });
    return out.value_or("");
  }
  // An agent's session keys live on a connection of their own and vanish when it closes (the
  // agent died): a peer knows at once, where a heartbeat would take its timeout. A cut-off
  // agent's connection stays open at the store, so heartbeats stay on (no has_sessions()).
  bool session_keys_vanish_on_death() const override { return true; }
  void set_session_key(const std::string& key, const std::string& value) override {
    guard([&] { client_->set_session(key, value); });
  }
  std::string describe() const override { return client_->describe(); }
  uint16_t port() const { return server_ ? server_->port() : 0; }

 private:
  // The client's errors name the store, operation and key; add what a user most likely needs.
  template <typename Fn>
  void guard(Fn&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      throw Error(str(e.what(), " (is the agent hosting the store still running?)"));
    }
  }

  std::unique_ptr<store::StoreServer> server_;  // when this agent hosts it (destroyed last)
  std::unique_ptr<store::StoreClient> client_;
};

}  // namespace

std::unique_ptr<KvStore> tcp_store_host(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                                        const std::string& secret) {
  const std::string address = store::listen_address_for(host);
  if (address.empty())
    log::info(str("rendezvous: '", host, "' is not an address of this machine as such (a name that resolves to "
                  "loopback here?); the store listens on every interface, authenticated by the job secret"));
  std::unique_ptr<store::StoreServer> server;
  try {
    server = std::make_unique<store::StoreServer>(address, port, secret);
  } catch (const Error& e) {
    throw Error(str("cannot host the rendezvous store on ", host, ":", port, ": ", e.what()));
  }
  const std::string reach = address.empty() ? "127.0.0.1" : address;
  auto client = std::make_unique<store::StoreClient>(reach, server->port(), secret, timeout, "rendezvous store");
  return std::make_unique<TcpStore>(std::move(server), std::move(client));
}

std::unique_ptr<KvStore> tcp_store_connect(const std::string& host, uint16_t port, std::chrono::milliseconds timeout,
                                           const std::string& secret) {
  try {
    return std::make_unique<TcpStore>(nullptr,
                                      std::make_unique<store::StoreClient>(host, port, secret, timeout, "rendezvous store"));
  } catch (const store::NoGreeting& e) {
    throw Error(str("the program listening on ", host, ":", port, " did not answer as a rendezvous store within ",
                    timeout.count(), " ms (port in use by something else? is the hosting agent alive?): ", e.what()));
  } catch (const store::AuthenticationFailed& e) {
    throw ConfigError(e.what());
  }
}

uint16_t tcp_store_port(const KvStore& store) {
  auto* tcp = dynamic_cast<const TcpStore*>(&store);
  return tcp ? tcp->port() : 0;
}

}  // namespace cadre::rdzv
