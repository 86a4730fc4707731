// The communication thread and the life of one op on it: a Gloo TCP context per generation,
// connected through the job store; ops run in issue order; every op's header is checked
// across ranks (inband.h: in the op's own first exchange) before its data moves; a failure
// poisons the communicator until rebuild().
#include "comm/communicator_impl.h"

#include <gloo/rendezvous/store.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/sigpipe_blocked.h"
#include "core/torch_compat.h"
#include "obs/flight_recorder.h"

namespace cadre::comm {

namespace {

// Gloo's rendezvous reads and writes through this view of the c10d store.
class GlooStoreOverC10d : public gloo::rendezvous::Store {
 public:
  explicit GlooStoreOverC10d(c10::intrusive_ptr<c10d::Store> store) : store_(std::move(store)) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_->set(key, std::vector<uint8_t>(data.begin(), data.end()));
  }
  std::vector<char> get(const std::string& key) override {
    auto v = store_->get(key);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_->wait(keys); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& timeout) override {
    store_->wait(keys, timeout);
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
};

// Every validated op sends its header on this one slot, whatever its sequence number, so a
// rank that skipped an op meets the others' next header and the difference is reported at
// once. Data phases use slots 4*seq+1 .. 4*seq+3 (seq >= 1), never this one.
constexpr uint64_t kHeaderSlot = 1;

OpSignature signature_of(const inband::Header& h) {
  return OpSignature{static_cast<OpKind>(h.kind), static_cast<at::ScalarType>(h.dtype), h.numel, h.detail};
}

}  // namespace

const char* op_kind_name(OpKind kind) {
  switch (kind) {
    case OpKind::AllReduce: return "all_reduce";
    case OpKind::AllGather: return "all_gather";
    case OpKind::ReduceScatter: return "reduce_scatter";
    case OpKind::Broadcast: return "broadcast";
    case OpKind::Barrier: return "barrier";
  }
  return "?";
}

std::string OpSignature::describe() const {
  std::string s = op_kind_name(kind);
  if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter)
    s += str("(", reduce_op_name(static_cast<ReduceOp>(detail)), ")");
  if (kind == OpKind::Broadcast) s += str("(root ", detail, ")");
  if (kind != OpKind::Barrier)
    s += str(" of ", numel, " x ", dtype_name(dtype), " (", numel * int64_t(c10::elementSize(dtype)), " bytes)");
  return s;
}

// ---------------------------------------------------------------------------------------------
// The communication thread

Communicator::Impl::~Impl() {
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    stopping = true;
  }
  queue_cv.notify_all();
  if (worker.joinable()) worker.join();
}

void Communicator::Impl::start() {
  validate = options.validate;
  if (size > 1) progress = std::make_shared<ProgressPublisher>(global_ranks[rank], progress_interval(options.timeout));
  connect();
  worker = std::thread([this] { loop(); });
}

void Communicator::Impl::loop() {
  SigpipeBlocked blocked;  // for this thread's whole life (see SigpipeBlocked)
  bind_interrupt(&interrupt);
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(queue_mu);
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty()) return;
      task = std::move(queue.front());
      queue.pop_front();
    }
    task();
  }
}

Work Communicator::Impl::submit(std::function<void()> body) {
  auto state = std::make_shared<Work::State>();
  {
    std::lock_guard<std::mutex> lock(queue_mu);
    queue.push_back([state, body = std::move(body)] {
      std::exception_ptr error;
      {
        RunningWork running(state.get());
        try {
          body();
        } catch (...) {
          error = std::current_exception();
        }
      }
      state->finish(error);
    });
  }
  queue_cv.notify_one();
  return Work(state);
}

std::string Communicator::Impl::where() const {
  return str("group '", tag, "' rank ", rank, "/", size, " (job rank ", global_ranks[rank], ")");
}

uint64_t Communicator::Impl::record_issue(const OpSignature& sig) {
  obs::FlightRecorder& recorder = obs::flight_recorder();
  if (!recorder.enabled()) return 0;
  const bool reduces = sig.kind == OpKind::AllReduce || sig.kind == OpKind::ReduceScatter;
  std::string detail = reduces ? reduce_op_name(static_cast<ReduceOp>(sig.detail))
                       : sig.kind == OpKind::Broadcast ? str("root ", sig.detail) : std::string();
  obs::CollectiveInfo info;
  info.group = tag.c_str();
  info.group_rank = rank;
  info.group_size = size;
  info.op = op_kind_name(sig.kind);
  info.detail = detail.c_str();
  info.dtype = sig.kind == OpKind::Barrier ? "" : c10::toString(sig.dtype);
  info.numel = sig.numel;
  info.bytes = sig.numel * int64_t(c10::elementSize(sig.dtype));
  return recorder.issued(info);
}

// ---------------------------------------------------------------------------------------------
// Connections

void Communicator::Impl::connect() {
  store = c10::make_intrusive<c10d::PrefixStore>(str("cadre/comm/", tag, "/gen", generation), root_store);
  auto ctx = std::make_shared<gloo::rendezvous::Context>(rank, size);
  ctx->setTimeout(options.timeout);
  auto gloo_store = std::make_shared<GlooStoreOverC10d>(store);
  try {
#if CADRE_GLOO_SHARED_STORE
    ctx->connectFullMesh(gloo_store, device);
#else
    ctx->connectFullMesh(*gloo_store, device);
#endif
  } catch (const std::exception& e) {
    throw Error(str("connecting ", where(), " (generation ", generation, ") failed: ", e.what()));
  }
  context = std::move(ctx);
  seq = 0;
  if (progress) progress->set_store(store);
  nccl.reset();  // a new generation's NCCL group, if any, is made on its first CUDA tensor
}

// Made by the first collective on CUDA tensors (every rank reaches it in the same op): a CPU
// job never creates one, so it never holds CUDA resources or leaves a group to be torn down.
NcclGroup& Communicator::Impl::nccl_group() {
  if (!nccl) {
    auto nccl_store = c10::make_intrusive<c10d::PrefixStore>(str("cadre/nccl/", tag, "/gen", generation), root_store);
    nccl = std::make_unique<NcclGroup>(nccl_store, rank, size, options.timeout);
  }
  return *nccl;
}

// ---------------------------------------------------------------------------------------------
// One op

// This rank's header for `sig` (payload size filled in per peer by the exchange).
inband::Header Communicator::Impl::header_for(const OpSignature& sig) const {
  inband::Header h;
  h.seq = seq;
  h.generation = generation;
  h.kind = static_cast<int64_t>(sig.kind);
  h.dtype = static_cast<int64_t>(sig.dtype);
  h.numel = sig.numel;
  h.detail = sig.detail;
  return h;
}

// The verdict every rank reaches alike from the same headers: out of step (another sequence
// number or generation), different ops or sizes, or agreement.
void Communicator::Impl::check_headers(const OpSignature& sig, const std::vector<inband::Header>& headers) const {
  std::string out_of_step, disagree;
  for (int r = 0; r < size; ++r) {
    const inband::Header& h = headers[r];
    if (r == rank) continue;
    if (h.seq != seq || h.generation != generation)
      out_of_step += str("; rank ", global_ranks[r], " is at collective #", h.seq, " (generation ", h.generation,
                         ", ", signature_of(h).describe(), ")");
    else if (!h.same_op(headers[rank]))
      disagree += str("; rank ", global_ranks[r], " called ", signature_of(h).describe());
  }
  if (!out_of_step.empty())
    throw OutOfStepError(str(sig.describe(), " on ", where(), ": ranks issued different numbers of collectives (this "
                             "rank is at collective #", seq, " (generation ", generation, ")", out_of_step,
                             "); nothing was sent; the communicator is unusable until every rank calls rebuild()"));
  if (!disagree.empty())
    throw MismatchError(str(sig.describe(), " on ", where(), ": ranks called different ops or sizes (this rank called ",
                            sig.describe(), disagree, "); nothing was sent"));
}

// An op ended by abort(): the reason names the lost peer, so no diagnosis; the connections
// close, so that no late message lands in a buffer this op no longer owns and the peers
// still in the op learn at once.
void Communicator::Impl::throw_aborted(const OpSignature& sig, bool began) {
  if (context) context->closeConnections();
  std::string message =
      str(sig.describe(), " on ", where(), began ? " aborted: " : " aborted before it began: ", interrupt.reason());
  std::string dump = obs::flight_recorder_dump_now(str("collective #", seq, " aborted: ", message));
  if (!dump.empty()) message += "; flight recorder dumped to " + dump;
  throw Error(message);
}

void Communicator::Impl::run(const OpSignature& sig, const OpPlan& plan) {
  if (poisoned) obs::flight_recorder().finished(sig.record, false);
  CADRE_CHECK(!poisoned, sig.describe(), " on ", where(), ": communicator is unusable after an earlier failure (",
              poison_reason, "); call rebuild() on every rank");
  if (interrupt.fired()) {
    obs::flight_recorder().finished(sig.record, false);
    poisoned = true;
    poison_reason = str(sig.describe(), " aborted before it began: ", interrupt.reason());
    throw_aborted(sig, /*began=*/false);
  }
  ++seq;
  obs::flight_recorder().started(sig.record, seq, generation);
  if (progress) progress->reached(seq, sig.describe());
  const auto deadline = std::chrono::steady_clock::now() + options.timeout;
  const uint64_t data_slot = uint64_t(seq) * 4 + 1;  // up to three data phases
  try {
    if (validate && size > 1) {
      const bool in_band = static_cast<bool>(plan.payload_for);
      auto none = [](int) { return std::pair<const void*, size_t>(nullptr, 0); };
      inband::Received got = inband::exchange(*context, kHeaderSlot, header_for(sig),
                                              in_band ? plan.payload_for : inband::PayloadFor(none), staging, deadline);
      check_headers(sig, got.headers);
      if (in_band) plan.complete(got);
      else plan.move(data_slot, deadline);
    } else {
      plan.move(data_slot, deadline);
    }
  } catch (const MismatchError&) {
    obs::flight_recorder().finished(sig.record, false);
    throw;
  } catch (const OutOfStepError& e) {
    obs::flight_recorder().finished(sig.record, false);
    poisoned = true;
    poison_reason = e.what();
    throw;
  } catch (const std::exception& e) {
    obs::flight_recorder().finished(sig.record, false);
    poisoned = true;
    poison_reason = str(sig.describe(), " failed: ", e.what());
    if (interrupt.fired()) throw_aborted(sig, /*began=*/true);
    throw_failed(sig, e, deadline);
  }
  obs::flight_recorder().finished(sig.record, true);
}

}  // namespace cadre::comm
