// c10d::Store over the job store (see c10d_store.h).
#include "comm/c10d_store.h"

#include "core/error.h"
#include "core/log.h"
#include "store/client.h"
#include "store/server.h"

namespace cadre::comm {
namespace {

std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }
std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }

}  // namespace

JobStore::JobStore(const JobEnv& env, bool host_server, std::chrono::milliseconds timeout) : c10d::Store(timeout) {
  CADRE_CONFIG_CHECK(!env.secret.empty(), "rank ", env.rank, ": no job secret for the store at ", env.master_addr, ":",
                     env.master_port);
  std::string reach = env.master_addr;
  if (host_server) {
    const std::string address = store::listen_address_for(env.master_addr);
    try {
      server_ = std::make_unique<store::StoreServer>(address, static_cast<uint16_t>(env.master_port), env.secret);
    } catch (const Error& e) {
      throw Error(str("rank ", env.rank, ": cannot host the job store for MASTER_ADDR=", env.master_addr,
                      " MASTER_PORT=", env.master_port, ": ", e.what()));
    }
    if (address.empty())
      log::info(str("job store: MASTER_ADDR=", env.master_addr, " is not an address of this machine as such; "
                    "listening on every interface (authenticated by the job secret)"));
    else
      reach = address;
  }
  reach_ = reach;
  port_ = static_cast<uint16_t>(env.master_port);
  secret_ = env.secret;
  try {
    client_ = std::make_unique<store::StoreClient>(reach_, port_, secret_, timeout);
  } catch (const Error& e) {
    throw Error(str("rank ", env.rank, ": ", e.what()));
  }
}

JobStore::JobStore(const std::string& reach, uint16_t port, const std::string& secret,
                   std::chrono::milliseconds timeout)
    : c10d::Store(timeout), reach_(reach), port_(port), secret_(secret) {
  client_ = std::make_unique<store::StoreClient>(reach_, port_, secret_, timeout);
}

#if CADRE_TORCH_STORE_HAS_CLONE
c10::intrusive_ptr<c10d::Store> JobStore::clone() {
  return c10::intrusive_ptr<c10d::Store>(c10::make_intrusive<JobStore>(reach_, port_, secret_, timeout_));
}
#endif

JobStore::~JobStore() = default;

void JobStore::set(const std::string& key, const std::vector<uint8_t>& value) { client_->set(key, text(value)); }

std::vector<uint8_t> JobStore::compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                          const std::vector<uint8_t>& desired) {
  return bytes(client_->compare_set(key, text(expected), text(desired)).value_or(""));
}

std::vector<uint8_t> JobStore::get(const std::string& key) { return bytes(client_->get(key, timeout_)); }

int64_t JobStore::add(const std::string& key, int64_t value) { return client_->add(key, value); }

bool JobStore::deleteKey(const std::string& key) { return client_->erase(key); }

bool JobStore::check(const std::vector<std::string>& keys) { return client_->check(keys); }

int64_t JobStore::getNumKeys() { return client_->num_keys(); }

void JobStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void JobStore::wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) {
  client_->wait(keys, timeout == kNoTimeout ? std::chrono::milliseconds(UINT32_MAX) : timeout);
}

}  // namespace cadre::comm
