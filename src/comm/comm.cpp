// The Communicator's life: a world group over the job store (c10d_store.h) and one Gloo TCP
// device, its sub-groups (sharing both), abort and rebuild. What the pieces do:
// communicator_impl.h (the communication thread and an op's life), collectives.cpp (each op),
// diagnosis.cpp (which ranks a failed op missed), work.cpp (the handles).
#include "comm/comm.h"

#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <unistd.h>

#include <cstdlib>

#include "comm/c10d_store.h"
#include "comm/communicator_impl.h"
#include "comm/sigpipe_blocked.h"
#include "core/log.h"
#include "obs/flight_recorder.h"

namespace cadre::comm {

namespace {

std::shared_ptr<gloo::transport::Device> create_device(const gloo::transport::tcp::attr& attr) {
  SigpipeBlocked blocked;  // for the device thread it starts
  return gloo::transport::tcp::CreateDevice(attr);
}

bool is_loopback(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string local_hostname_for(const std::string& master_addr) {
  if (const char* h = std::getenv("CADRE_COMM_HOST"); h && *h) return h;
  if (is_loopback(master_addr)) return "127.0.0.1";
  char name[256] = {0};
  CADRE_CHECK(gethostname(name, sizeof name - 1) == 0, "gethostname failed");
  return name;
}

}  // namespace

Communicator::Communicator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Communicator::Communicator(const JobEnv& env, CommOptions options) : impl_(std::make_unique<Impl>()) {
  // One process alone needs no network store (and takes no port).
  if (env.world_size == 1)
    impl_->root_store = c10::make_intrusive<c10d::HashStore>();
  else
    impl_->root_store = c10::make_intrusive<JobStore>(env, /*host_server=*/env.rank == 0, options.timeout);
  gloo::transport::tcp::attr attr;
  attr.hostname = local_hostname_for(env.master_addr);
  impl_->device = create_device(attr);
  impl_->tag = "world";
  for (int r = 0; r < env.world_size; ++r) impl_->global_ranks.push_back(r);
  impl_->rank = env.rank;
  impl_->size = env.world_size;
  impl_->options = options;
  obs::flight_recorder().set_rank(env.rank);
  impl_->start();
  log::set_rank(env.rank);
}

Communicator::~Communicator() = default;

int Communicator::rank() const { return impl_->rank; }
int Communicator::size() const { return impl_->size; }
const std::string& Communicator::name() const { return impl_->tag; }
const char* Communicator::backend() const { return NcclGroup::usable() ? "gloo+nccl" : "gloo"; }
const CommOptions& Communicator::options() const { return impl_->options; }
void Communicator::set_validate(bool validate) { impl_->validate = validate; }
bool Communicator::poisoned() const { return impl_->poisoned; }

void Communicator::abort(const std::string& reason) { impl_->interrupt.fire(reason); }

void Communicator::rebuild() {
  Impl* impl = impl_.get();
  impl->submit([impl] {
    if (impl->context) impl->context->closeConnections();
    impl->context.reset();
    impl->interrupt.reset();
    ++impl->generation;
    impl->connect();
    impl->poisoned = false;
    impl->poison_reason.clear();
    log::info(str("communicator ", impl->where(), " rebuilt (generation ", impl->generation, ")"));
  }).wait();
}

std::unique_ptr<Communicator> Communicator::subgroup(const std::vector<int>& ranks, const std::string& tag,
                                                   const CommOptions* options) {
  CADRE_CHECK(!ranks.empty(), "subgroup '", tag, "': no ranks");
  for (size_t i = 1; i < ranks.size(); ++i)
    CADRE_CHECK(ranks[i - 1] < ranks[i], "subgroup '", tag, "': ranks must be sorted and distinct");
  auto sub = std::make_unique<Impl>();
  sub->root_store = impl_->root_store;
  sub->device = impl_->device;
  sub->tag = impl_->tag == "world" ? tag : impl_->tag + "." + tag;
  sub->options = options ? *options : impl_->options;
  sub->size = static_cast<int>(ranks.size());
  sub->rank = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    CADRE_CHECK(ranks[i] >= 0 && ranks[i] < size(), "subgroup '", tag, "': rank ", ranks[i], " is outside the group of ", size());
    sub->global_ranks.push_back(impl_->global_ranks[ranks[i]]);
    if (ranks[i] == rank()) sub->rank = static_cast<int>(i);
  }
  CADRE_CHECK(sub->rank >= 0, "subgroup '", tag, "': this rank (", rank(), ") is not a member");
  sub->start();
  return std::unique_ptr<Communicator>(new Communicator(std::move(sub)));
}

bool all_ranks_agree(Communicator* group, bool ok) {
  if (!group) return ok;
  at::Tensor failed = at::full({1}, ok ? 0 : 1, at::kLong);
  group->all_reduce(failed, ReduceOp::Max);
  return failed.item<int64_t>() == 0;
}

HybridGroups make_hybrid_groups(Communicator& world, int ranks_per_node) {
  const int n = world.size();
  CADRE_CHECK(ranks_per_node > 0 && n % ranks_per_node == 0, "hybrid groups: world size ", n,
              " is not a multiple of ranks per node ", ranks_per_node);
  const int node = world.rank() / ranks_per_node, local = world.rank() % ranks_per_node;
  std::vector<int> shard, replica;
  for (int i = 0; i < ranks_per_node; ++i) shard.push_back(node * ranks_per_node + i);
  for (int m = 0; m < n / ranks_per_node; ++m) replica.push_back(m * ranks_per_node + local);
  HybridGroups groups;
  groups.shard = world.subgroup(shard, str("shard", node));
  groups.replica = world.subgroup(replica, str("replica", local));
  return groups;
}

}  // namespace cadre::comm
