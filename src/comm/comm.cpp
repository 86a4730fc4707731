// Communicator implementation: the job store (c10d_store.h) for rendezvous, a Gloo TCP context per
// generation, a communication thread that runs ops in issue order, argument checks, the
// cross-rank check of every op's header (inband.h: in the op's own first exchange), failure
// diagnosis from the progress marks (progress.h), and rebuild.
#include "comm/comm.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/device.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <ATen/ATen.h>

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <cstdlib>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>

#include "comm/c10d_store.h"
#include "comm/inband.h"
#include "comm/interrupt.h"
#include "comm/nccl_group.h"
#include "comm/progress.h"
#include "comm/ring.h"
#include "core/error.h"
#include "core/log.h"
#include "core/torch_compat.h"
#include "obs/flight_recorder.h"
#include "obs/step_timer.h"
#include "store/secret.h"

namespace cadre::comm {

// ---------------------------------------------------------------------------------------------
// Names and environment

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "sum";
    case ReduceOp::Avg: return "avg";
    case ReduceOp::Max: return "max";
  }
  return "?";
}

ReduceOp parse_reduce_op(const std::string& name) {
  if (name == "sum") return ReduceOp::Sum;
  if (name == "avg") return ReduceOp::Avg;
  if (name == "max") return ReduceOp::Max;
  throw ConfigError(str("unknown reduction '", name, "' (expected sum, avg or max)"));
}

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float";
    case at::kBFloat16: return "bfloat16";
    case at::kHalf: return "half";
    case at::kLong: return "int64";
    default: return c10::toString(type);
  }
}

at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float" || name == "float32" || name == "fp32") return at::kFloat;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  if (name == "half" || name == "float16" || name == "fp16") return at::kHalf;
  if (name == "int64" || name == "long" || name == "int64_t") return at::kLong;
  throw ConfigError(str("unsupported dtype '", name, "' (expected float, bfloat16, half or int64)"));
}

static int env_int(const char* name, int fallback, bool required) {
  const char* v = std::getenv(name);
  if (!v || !*v) {
    CADRE_CONFIG_CHECK(!required, "environment variable ", name,
                       " is not set (run under `cadre run` or set RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)");
    return fallback;
  }
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  CADRE_CONFIG_CHECK(end && *end == 0, "environment variable ", name, "='", v, "' is not an integer");
  return static_cast<int>(x);
}

JobEnv JobEnv::from_env() {
  JobEnv env;
  env.world_size = env_int("WORLD_SIZE", 1, false);
  env.rank = env_int("RANK", 0, env.world_size > 1);
  env.master_port = env_int("MASTER_PORT", 29500, env.world_size > 1);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) env.master_addr = a;
  CADRE_CONFIG_CHECK(env.world_size >= 1 && env.rank >= 0 && env.rank < env.world_size, "RANK=", env.rank,
                     " is outside WORLD_SIZE=", env.world_size);
  CADRE_CONFIG_CHECK(env.master_port > 0 && env.master_port < 65536, "MASTER_PORT=", env.master_port, " is not a port");
  if (env.world_size > 1) {
    auto secret = store::job_secret_from_environment();
    CADRE_CONFIG_CHECK(secret, "rank ", env.rank, ": WORLD_SIZE=", env.world_size, " needs the job secret that "
                       "authenticates the store on MASTER_PORT: run under `cadre run`, or set ", store::kSecretEnv,
                       " or ", store::kSecretFileEnv, " (the same on every rank) when launching ranks yourself");
    env.secret = *secret;
  }
  return env;
}

// ---------------------------------------------------------------------------------------------
// Work handles

struct Work::State {
  std::mutex mu;
  std::condition_variable cv;
  bool finished = false;
  std::exception_ptr error;
  // A NCCL op finishes on the communication thread once it is enqueued on NCCL's stream; this
  // then makes the waiting thread's current stream wait for it (nccl_group.h). Empty on CPU.
  std::function<void()> stream_wait;
  void finish(std::exception_ptr e) {
    std::lock_guard<std::mutex> lock(mu);
    finished = true;
    error = e;
    cv.notify_all();
  }
};

void Work::wait() {
  if (!state_) return;  // an empty handle stands for work that finished synchronously
  std::unique_lock<std::mutex> lock(state_->mu);
  if (!state_->finished) {
    // Time blocked here is the calling thread's communication wait (a step's time split).
    const auto t0 = std::chrono::steady_clock::now();
    state_->cv.wait(lock, [&] { return state_->finished; });
    obs::comm_wait_add(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  if (state_->error) std::rethrow_exception(state_->error);
  if (state_->stream_wait) {
    auto stream_wait = std::move(state_->stream_wait);
    state_->stream_wait = nullptr;
    lock.unlock();
    stream_wait();
  }
}

bool Work::done() const {
  if (!state_) return true;
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->finished;
}

namespace {
// The op running on this communication thread (set around each task by Impl::submit): where a
// NCCL op leaves the stream wait for the thread that waits on its Work. Set before finish(),
// whose lock hands it over to that thread.
thread_local Work::State* current_work = nullptr;
void set_stream_wait(std::function<void()> wait) {
  if (current_work) current_work->stream_wait = std::move(wait);
}

// For a CUDA tensor, taken on the issuing thread: the op is ordered after the work queued on
// that thread's stream so far (nccl_group.h). Null for CPU tensors, which Gloo moves.
std::shared_ptr<NcclGroup::IssueMark> issue_mark(const at::Tensor& tensor) {
  return tensor.is_cuda() ? NcclGroup::mark_issue(tensor) : nullptr;
}
}  // namespace

// ---------------------------------------------------------------------------------------------
// Implementation

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

enum class OpKind : int64_t { AllReduce = 1, AllGather, ReduceScatter, Broadcast, Barrier };

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

// What one rank is about to do; compared across ranks before data moves.
struct OpSignature {
  OpKind kind = OpKind::Barrier;
  at::ScalarType dtype = at::kByte;
  int64_t numel = 0;  // elements of the input
  int64_t detail = 0; // reduction or root
  uint64_t record = 0;  // its flight-recorder entry
  std::string describe() const {
    std::string s = op_kind_name(kind);
    if (kind == OpKind::AllReduce || kind == OpKind::ReduceScatter)
      s += str("(", reduce_op_name(static_cast<ReduceOp>(detail)), ")");
    if (kind == OpKind::Broadcast) s += str("(root ", detail, ")");
    if (kind != OpKind::Barrier)
      s += str(" of ", numel, " x ", dtype_name(dtype), " (", numel * int64_t(c10::elementSize(dtype)), " bytes)");
    return s;
  }
};

// Marks a failure detected before any data moved: the communicator stays usable.
struct MismatchError : Error {
  using Error::Error;
};
// Ranks that disagree about which collective comes next (a rank skipped or added one): no
// later op can pair up, so the communicator is poisoned until rebuild().
struct OutOfStepError : Error {
  using Error::Error;
};

// Every validated op sends its header on this one slot, whatever its sequence number, so a
// rank that skipped an op meets the others' next header and the difference is reported at
// once. Data phases use slots 4*seq+1 .. 4*seq+3 (seq >= 1), never this one.
constexpr uint64_t kHeaderSlot = 1;

// How often a rank's progress record reaches the store: often enough to be current when an
// op times out, rare enough to cost nothing per op.
std::chrono::milliseconds progress_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

// How an op moves its data. With validation on, an op whose data fits a header's payload
// (`payload_for` set) sends it in the header exchange and finishes in `complete`; any other
// op exchanges headers alone first and then runs `move`, as an op without validation does.
struct OpPlan {
  inband::PayloadFor payload_for;
  std::function<void(const inband::Received&)> complete;
  std::function<void(uint64_t slot, ring::Deadline)> move;
};

// Gloo's TCP pairs write with writev, which raises SIGPIPE when the peer has closed its end (a
// rank that left, or one that rebuilt while the others still send): that signal's default
// action kills the process silently, where the write's EPIPE would fail the op with an error
// that names it. Gloo writes on its device thread and on the threads that post sends (our
// communication thread); both block SIGPIPE (the device thread inherits the mask it is
// created with), so the write returns EPIPE. The program's own threads are left as they are.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeBlocked() { pthread_sigmask(SIG_SETMASK, &old_, nullptr); }
  SigpipeBlocked(const SigpipeBlocked&) = delete;
  SigpipeBlocked& operator=(const SigpipeBlocked&) = delete;

 private:
  sigset_t old_;
};

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

namespace {

// The diagnosis's reading of the progress marks (see Impl::missing_ranks).
std::string arrivals_in_store(c10d::Store& store, const std::vector<int>& global_ranks, int rank, int64_t seq,
                              ring::Deadline deadline) {
  for (;;) {
    std::string missing;
    for (int r = 0; r < static_cast<int>(global_ranks.size()); ++r) {
      if (r == rank) continue;
      std::string key = ProgressPublisher::key(global_ranks[r]), last = "none";
      try {
        if (store.check({key})) {
          auto v = store.get(key);
          last.assign(v.begin(), v.end());
        }
      } catch (const std::exception& e) {
        return str("arrival of the other ranks unknown (store unreachable: ", e.what(), ")");
      }
      int64_t their_seq = last == "none" ? 0 : std::atoll(last.c_str());
      if (their_seq < seq)
        missing += str(missing.empty() ? "" : "; ", "rank ", global_ranks[r], " (last op reached: ", last, ")");
    }
    if (missing.empty()) return "every rank arrived";
    if (std::chrono::steady_clock::now() >= deadline) return "did not arrive: " + missing;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // diagnosis only, after a failure
  }
}

}  // namespace

struct Communicator::Impl {
  // Shared by a world communicator and its sub-groups.
  c10::intrusive_ptr<c10d::Store> root_store;
  std::shared_ptr<gloo::transport::Device> device;

  std::string tag;                // "world" or the sub-group tag
  std::vector<int> global_ranks;  // group rank -> job rank
  int rank = 0, size = 1;
  CommOptions options;
  std::atomic<bool> validate{true};

  // Owned by the communication thread.
  int generation = 0;
  int64_t seq = 0;
  c10::intrusive_ptr<c10d::Store> store;  // prefixed by tag and generation
  std::shared_ptr<gloo::rendezvous::Context> context;
  ring::Scratch scratch;
  std::unique_ptr<NcclGroup> nccl;  // CUDA tensors, when libtorch has NCCL (untested here); see nccl_group()

  inband::Staging staging;
  std::shared_ptr<ProgressPublisher> progress;  // only with more than one rank (shared with a diagnosis)

  std::atomic<bool> poisoned{false};
  std::string poison_reason;
  Interrupt interrupt;  // abort(): ends the op in flight

  std::mutex queue_mu;
  std::condition_variable queue_cv;
  std::deque<std::function<void()>> queue;
  bool stopping = false;
  std::thread worker;

  ~Impl() {
    {
      std::lock_guard<std::mutex> lock(queue_mu);
      stopping = true;
    }
    queue_cv.notify_all();
    if (worker.joinable()) worker.join();
  }

  void start() {
    validate = options.validate;
    if (size > 1) progress = std::make_shared<ProgressPublisher>(global_ranks[rank], progress_interval(options.timeout));
    connect();
    worker = std::thread([this] { loop(); });
  }

  void loop() {
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

  Work submit(std::function<void()> body) {
    auto state = std::make_shared<Work::State>();
    {
      std::lock_guard<std::mutex> lock(queue_mu);
      queue.push_back([state, body = std::move(body)] {
        try {
          current_work = state.get();
          body();
          current_work = nullptr;
          state->finish(nullptr);
        } catch (...) {
          current_work = nullptr;
          state->finish(std::current_exception());
        }
      });
    }
    queue_cv.notify_one();
    return Work(state);
  }

  std::string where() const { return str("group '", tag, "' rank ", rank, "/", size, " (job rank ", global_ranks[rank], ")"); }

  // The op's flight-recorder entry, on the issuing thread.
  uint64_t record_issue(const OpSignature& sig) {
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

  void connect() {
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

  // The NCCL group, made by the first collective on CUDA tensors (every rank reaches it in the
  // same op): a CPU job never creates one, so it never holds CUDA resources or leaves a group
  // to be torn down.
  NcclGroup& nccl_group() {
    if (!nccl) {
      auto nccl_store = c10::make_intrusive<c10d::PrefixStore>(str("cadre/nccl/", tag, "/gen", generation), root_store);
      nccl = std::make_unique<NcclGroup>(nccl_store, rank, size, options.timeout);
    }
    return *nccl;
  }

  // How long the diagnosis looks for ranks that have not arrived. After a timeout: no longer.
  // After a peer error before the deadline (a reset connection: the peer died), a live rank's
  // progress mark is current within two publishing intervals, and a dead one's never will be:
  // waiting out the op's deadline would only delay the error, and with it the recovery, by up
  // to the whole timeout (CommOptions::peer_error_diagnosis).
  ring::Deadline diagnosis_deadline(ring::Deadline op_deadline) const {
    const std::chrono::milliseconds window = options.peer_error_diagnosis.count() >= 0
                                                 ? options.peer_error_diagnosis
                                                 : 2 * progress_interval(options.timeout) + std::chrono::milliseconds(250);
    return std::min(op_deadline, std::chrono::steady_clock::now() + window);
  }

  // Ranks of this group that have not reached op `seq` by `deadline`, from the progress marks
  // in the store (progress.h; read only here, after a failure). A peer error can come before
  // the deadline (a rank that left closes its pairs), when live ranks may not have published
  // their mark yet: keep looking until `deadline` (diagnosis_deadline). The job store lives on
  // group rank 0's host, which may be the host that failed: its calls then wait out their own
  // timeouts (5 s each, twice over), so the diagnosis gets a bounded wait and the failure is
  // reported without it past that, the reads finishing in the background (they hold copies and
  // shared pointers).
  std::string missing_ranks(ring::Deadline deadline) {
    if (!progress) return "every rank arrived";
    struct Diagnosis {
      std::string publish_error, answer;
    };
    auto result = std::make_shared<std::promise<Diagnosis>>();
    std::future<Diagnosis> answer = result->get_future();
    std::thread([result, progress = progress, store = store, ranks = global_ranks, me = rank, seq = seq, deadline] {
      Diagnosis d;
      try {
        d.publish_error = progress->publish_now();
        d.answer = arrivals_in_store(*store, ranks, me, seq, deadline);
      } catch (const std::exception& e) {
        d.answer = str("arrival of the other ranks unknown (", e.what(), ")");
      }
      result->set_value(std::move(d));
    }).detach();
    // Until the op's deadline (a peer error can come before it) and a short grace after it.
    const auto grace = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(2000), options.timeout / 4);
    if (answer.wait_until(std::max(deadline, std::chrono::steady_clock::now()) + grace) != std::future_status::ready)
      return str("arrival of the other ranks unknown (the job store did not answer ", grace.count(),
                 " ms after the op's deadline)");
    Diagnosis d = answer.get();
    if (!d.publish_error.empty()) log::warn(d.publish_error);
    return d.answer;
  }

  // This rank's header for `sig` (payload size filled in per peer by the exchange).
  inband::Header header_for(const OpSignature& sig) const {
    inband::Header h;
    h.seq = seq;
    h.generation = generation;
    h.kind = static_cast<int64_t>(sig.kind);
    h.dtype = static_cast<int64_t>(sig.dtype);
    h.numel = sig.numel;
    h.detail = sig.detail;
    return h;
  }

  static OpSignature signature_of(const inband::Header& h) {
    return OpSignature{static_cast<OpKind>(h.kind), static_cast<at::ScalarType>(h.dtype), h.numel, h.detail};
  }

  // The verdict every rank reaches alike from the same headers: out of step (another sequence
  // number or generation), different ops or sizes, or agreement.
  void check_headers(const OpSignature& sig, const std::vector<inband::Header>& headers) const {
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
  [[noreturn]] void throw_aborted(const OpSignature& sig, bool began) {
    if (context) context->closeConnections();
    std::string message =
        str(sig.describe(), " on ", where(), began ? " aborted: " : " aborted before it began: ", interrupt.reason());
    std::string dump = obs::flight_recorder_dump_now(str("collective #", seq, " aborted: ", message));
    if (!dump.empty()) message += "; flight recorder dumped to " + dump;
    throw Error(message);
  }

  // Runs one op on the communication thread: header exchange (with the data of a small op) and
  // cross-rank check when validating, then data movement.
  void run(const OpSignature& sig, const OpPlan& plan) {
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
      const bool peer_error = std::chrono::steady_clock::now() < deadline;
      const std::string missing = missing_ranks(diagnosis_deadline(deadline));
      std::string message = str(sig.describe(), " on ", where(), " failed after ", options.timeout.count(),
                                " ms timeout or peer error: ", e.what(), "; ", missing,
                                peer_error ? " (progress marks read briefly after the peer error)" : "");
      // Every rank that sees the failure leaves its last collectives behind for the diagnosis.
      std::string dump = obs::flight_recorder_dump_now(str("collective #", seq, " failed: ", message));
      if (!dump.empty()) message += "; flight recorder dumped to " + dump;
      throw Error(message);
    }
    obs::flight_recorder().finished(sig.record, true);
  }
};

// ---------------------------------------------------------------------------------------------
// Argument checks and dtype plumbing

namespace {

bool is_narrow_float(at::ScalarType t) { return t == at::kBFloat16 || t == at::kHalf; }

bool supported_dtype(at::ScalarType t) {
  return t == at::kFloat || t == at::kBFloat16 || t == at::kHalf || t == at::kLong;
}

void check_tensor(const at::Tensor& t, const char* op, const char* role) {
  CADRE_CHECK(t.defined(), op, ": ", role, " tensor is undefined");
  CADRE_CHECK(t.device().is_cpu() || (t.device().is_cuda() && NcclGroup::usable()), op, ": ", role, " tensor is on ",
              t.device(), "; Gloo moves CPU tensors and this libtorch has no NCCL for others");
  CADRE_CHECK(supported_dtype(t.scalar_type()), op, ": ", role, " dtype ", t.scalar_type(),
              " is not supported (float32, bfloat16, float16, int64)");
  CADRE_CHECK(t.is_contiguous(), op, ": ", role, " tensor must be contiguous");
}

ring::Elem ring_elem(at::ScalarType t) {
  switch (t) {
    case at::kLong: return ring::Elem::I64;
    case at::kBFloat16: return ring::Elem::BF16;
    case at::kHalf: return ring::Elem::F16;
    default: return ring::Elem::F32;
  }
}
ring::Combine ring_combine(ReduceOp op) { return op == ReduceOp::Max ? ring::Combine::Max : ring::Combine::Sum; }
// Float averages divide inside the ring's last fold (before rounding); int64 ones afterwards.
float ring_divisor(ReduceOp op, at::ScalarType t, int size) {
  return op == ReduceOp::Avg && t != at::kLong ? float(size) : 1.0f;
}

// int64 averages truncate toward zero, as integer division does.
void divide_for_average(at::Tensor block, int size) { block.div_(size, "trunc"); }

}  // namespace

// Below this many gathered bytes an all_reduce is one all-gather plus a local reduction: one
// exchange instead of two halves the message round trips that dominate small ops. With
// validation on the same ops carry their data in the header exchange (no extra message).
constexpr int64_t kSmallAllReduceBytes = 256 << 10;
static_assert(size_t(kSmallAllReduceBytes) / 2 <= inband::kMaxPayload, "a 2-rank small op fits one header's payload");

namespace {

// out = reduction of the rows of `rows` (one per rank) in rank order, so every rank that
// reduces the same rows gets identical bits. Floats accumulate in float32 and round once.
void reduce_rows(const at::Tensor& rows, const at::Tensor& out, ReduceOp op) {
  const int64_t n = rows.size(0);
  const at::ScalarType acc_dtype = rows.scalar_type() == at::kLong ? at::kLong : at::kFloat;
  at::Tensor acc = rows[0].to(acc_dtype);
  for (int64_t r = 1; r < n; ++r) {
    at::Tensor row = rows[r].to(acc_dtype);
    if (op == ReduceOp::Max) acc = at::maximum(acc, row);
    else acc.add_(row);
  }
  if (op == ReduceOp::Avg) {
    if (acc_dtype == at::kLong) divide_for_average(acc, n);
    else acc.div_(n);
  }
  out.view(-1).copy_(acc);
}

// Rows for reduce_rows: this rank's `own` block and each peer's payload from the exchange.
at::Tensor rows_from(const inband::Received& got, int rank, const at::Tensor& own) {
  const int n = static_cast<int>(got.headers.size());
  const int64_t numel = own.numel();
  at::Tensor rows = at::empty({n, numel}, own.options());
  for (int r = 0; r < n; ++r) {
    if (r == rank) rows[r].copy_(own.view(-1));
    else if (numel) std::memcpy(rows[r].data_ptr(), got.payloads[r], numel * own.element_size());
  }
  return rows;
}

std::pair<const void*, size_t> bytes_of(const at::Tensor& t) { return {t.data_ptr(), t.numel() * t.element_size()}; }

}  // namespace

static void small_all_reduce(Communicator::Impl& impl, uint64_t slot, const at::Tensor& tensor, ReduceOp op,
                             ring::Deadline deadline) {
  const int64_t numel = tensor.numel();
  at::Tensor rows = at::empty({impl.size, numel}, tensor.options());
  ring::all_gather(*impl.context, slot, tensor.data_ptr(), rows.data_ptr(), numel * tensor.element_size(), deadline);
  reduce_rows(rows, tensor, op);
}

// ---------------------------------------------------------------------------------------------
// Communicator

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

Work Communicator::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  check_tensor(tensor, "all_reduce", "input");
  OpSignature sig{OpKind::AllReduce, tensor.scalar_type(), tensor.numel(), static_cast<int64_t>(op)};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const bool small = tensor.numel() * tensor.element_size() * impl->size <= kSmallAllReduceBytes;
  if (small && !tensor.is_cuda()) {
    plan.payload_for = [tensor](int) { return bytes_of(tensor); };
    plan.complete = [impl, tensor, op](const inband::Received& got) {
      if (tensor.numel()) reduce_rows(rows_from(got, impl->rank, tensor), tensor, op);
    };
  }
  plan.move = [impl, tensor, op, small, issued = issue_mark(tensor)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().all_reduce(*issued, tensor, op));
    const int n = impl->size, r = impl->rank;
    const int64_t numel = tensor.numel(), block = (numel + n - 1) / n, padded = block * n;
    if (numel == 0) return;
    const at::ScalarType dtype = tensor.scalar_type();
    if (n > 1 && small) return small_all_reduce(*impl, slot, tensor, op, deadline);
    // Sizes not divisible by the world size go through a zero-padded copy.
    const bool in_place = padded == numel;
    at::Tensor work = tensor.view(-1);
    if (!in_place) {
      work = at::zeros({padded}, tensor.options());
      work.narrow(0, 0, numel).copy_(tensor.view(-1));
    }
    at::Tensor mine = work.narrow(0, r * block, block);
    ring::reduce_scatter(*impl->context, slot, work.data_ptr(), mine.data_ptr(), block, ring_elem(dtype),
                         ring_combine(op), ring_divisor(op, dtype, n), deadline, impl->scratch);
    if (op == ReduceOp::Avg && dtype == at::kLong) divide_for_average(mine, n);
    ring::all_gather(*impl->context, slot + 1, mine.data_ptr(), work.data_ptr(), block * work.element_size(), deadline);
    if (!in_place) tensor.view(-1).copy_(work.narrow(0, 0, numel));
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::all_gather_async(at::Tensor output, at::Tensor input) {
  check_tensor(input, "all_gather", "input");
  check_tensor(output, "all_gather", "output");
  CADRE_CHECK(output.scalar_type() == input.scalar_type(), "all_gather: output dtype ", output.scalar_type(),
              " differs from input dtype ", input.scalar_type());
  CADRE_CHECK(output.numel() == input.numel() * size(), "all_gather: output has ", output.numel(),
              " elements; expected world size ", size(), " x input ", input.numel());
  OpSignature sig{OpKind::AllGather, input.scalar_type(), input.numel(), 0};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const size_t block_bytes = input.numel() * input.element_size();
  if (!input.is_cuda() && int64_t(block_bytes) * impl->size <= kSmallAllReduceBytes) {
    plan.payload_for = [input](int) { return bytes_of(input); };
    plan.complete = [impl, output, input, block_bytes](const inband::Received& got) {
      char* out = static_cast<char*>(output.data_ptr());
      for (int r = 0; r < impl->size; ++r) {
        const void* from = r == impl->rank ? input.data_ptr() : got.payloads[r];
        if (block_bytes && from != out + r * block_bytes) std::memcpy(out + r * block_bytes, from, block_bytes);
      }
    };
  }
  plan.move = [impl, output, input, block_bytes, issued = issue_mark(input)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().all_gather(*issued, output, input));
    if (block_bytes == 0) return;
    ring::all_gather(*impl->context, slot, input.data_ptr(), output.data_ptr(), block_bytes, deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  check_tensor(input, "reduce_scatter", "input");
  check_tensor(output, "reduce_scatter", "output");
  // A widening reduce-scatter (bf16/f16 in, float32 out) keeps the float32 sum unrounded. Only
  // the input's dtype is validated across ranks: it alone decides what travels between them.
  const bool widening = output.scalar_type() == at::kFloat && is_narrow_float(input.scalar_type());
  CADRE_CHECK(output.scalar_type() == input.scalar_type() || widening, "reduce_scatter: output dtype ",
              output.scalar_type(), " differs from input dtype ", input.scalar_type(),
              " (a different output dtype must be float32, for bfloat16 or float16 input)");
  CADRE_CHECK(!widening || !input.is_cuda(), "reduce_scatter: ", input.scalar_type(),
              " input with float32 output runs on CPU tensors only; NCCL reduces in one dtype");
  CADRE_CHECK(input.numel() == output.numel() * size(), "reduce_scatter: input has ", input.numel(),
              " elements; expected world size ", size(), " x output ", output.numel());
  OpSignature sig{OpKind::ReduceScatter, input.scalar_type(), input.numel(), static_cast<int64_t>(op)};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  const int64_t block = output.numel();
  if (!input.is_cuda() && input.numel() * input.element_size() <= kSmallAllReduceBytes) {
    // Each peer gets only its own block of this rank's input.
    plan.payload_for = [input, block](int peer) { return bytes_of(input.view(-1).narrow(0, peer * block, block)); };
    plan.complete = [impl, output, input, block, op](const inband::Received& got) {
      // Read this rank's block before writing output (they may alias).
      if (block) reduce_rows(rows_from(got, impl->rank, input.view(-1).narrow(0, impl->rank * block, block)), output, op);
    };
  }
  plan.move = [impl, output, input, op, block, widening, issued = issue_mark(input)](uint64_t slot,
                                                                                     ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().reduce_scatter(*issued, output, input, op));
    if (block == 0) return;
    const at::ScalarType dtype = input.scalar_type();
    ring::reduce_scatter(*impl->context, slot, input.data_ptr(), output.data_ptr(), block, ring_elem(dtype),
                         ring_combine(op), ring_divisor(op, dtype, impl->size), deadline, impl->scratch, widening);
    if (op == ReduceOp::Avg && dtype == at::kLong) divide_for_average(output, impl->size);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::broadcast_async(at::Tensor tensor, int root) {
  check_tensor(tensor, "broadcast", "input");
  CADRE_CHECK(root >= 0 && root < size(), "broadcast: root ", root, " is outside the group of ", size());
  OpSignature sig{OpKind::Broadcast, tensor.scalar_type(), tensor.numel(), root};
  Impl* impl = impl_.get();
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  if (!tensor.is_cuda() && size_t(tensor.numel() * tensor.element_size()) <= inband::kMaxPayload) {
    plan.payload_for = [impl, tensor, root](int) {
      return impl->rank == root ? bytes_of(tensor) : std::pair<const void*, size_t>(nullptr, 0);
    };
    plan.complete = [impl, tensor, root](const inband::Received& got) {
      if (impl->rank != root && tensor.numel())
        std::memcpy(tensor.data_ptr(), got.payloads[root], tensor.numel() * tensor.element_size());
    };
  }
  plan.move = [impl, tensor, root, issued = issue_mark(tensor)](uint64_t slot, ring::Deadline deadline) {
    if (issued) return set_stream_wait(impl->nccl_group().broadcast(*issued, tensor, root));
    ring::broadcast(*impl->context, slot, tensor.data_ptr(), tensor.numel() * tensor.element_size(), root, deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

Work Communicator::barrier_async() {
  Impl* impl = impl_.get();
  OpSignature sig;
  sig.record = impl->record_issue(sig);
  OpPlan plan;
  // Validated, the header exchange is the barrier.
  plan.payload_for = [](int) { return std::pair<const void*, size_t>(nullptr, 0); };
  plan.complete = [](const inband::Received&) {};
  plan.move = [impl](uint64_t slot, ring::Deadline deadline) {
    std::vector<int64_t> marks(impl->size, 1);
    ring::all_gather(*impl->context, slot, marks.data() + impl->rank, marks.data(), sizeof(int64_t), deadline);
  };
  return impl->submit([impl, sig, plan = std::move(plan)] { impl->run(sig, plan); });
}

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
