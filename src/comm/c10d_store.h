// The job's MASTER_PORT store as c10d sees it: a c10d::Store over Cadre's authenticated job
// store (src/store), so Gloo's rendezvous, PrefixStore, ProcessGroupGloo and NCCL use it like
// the TCPStore it replaces. Rank 0 hosts the server, on MASTER_ADDR's address only.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <memory>

#include "comm/comm.h"
#include "core/torch_compat.h"

namespace cadre::store {
class StoreClient;
class StoreServer;
}  // namespace cadre::store

namespace cadre::comm {

class JobStore : public c10d::Store {
 public:
  // Rank 0 hosts (host_server), every rank connects; Error naming the rank and address.
  JobStore(const JobEnv& env, bool host_server, std::chrono::milliseconds timeout);
  ~JobStore() override;

  void set(const std::string& key, const std::vector<uint8_t>& value) override;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override;
  std::vector<uint8_t> get(const std::string& key) override;  // waits up to the timeout
  int64_t add(const std::string& key, int64_t value) override;
  bool deleteKey(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  int64_t getNumKeys() override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override;
#if CADRE_TORCH_STORE_HAS_CLONE
  // Another connection to the same store (never a second server).
  c10::intrusive_ptr<c10d::Store> clone() override;
#endif
  // A client only, of the store at reach:port (what clone() makes).
  JobStore(const std::string& reach, uint16_t port, const std::string& secret, std::chrono::milliseconds timeout);

 private:
  std::string reach_;
  uint16_t port_ = 0;
  std::string secret_;
  std::unique_ptr<store::StoreServer> server_;
  std::unique_ptr<store::StoreClient> client_;
};

}  // namespace cadre::comm
