// Communicator: collectives between the ranks of a job (all_reduce, all_gather, reduce_scatter,
// broadcast, barrier) for float32, bfloat16, float16 and int64, asynchronous with handles, with
// a timeout on every op and errors that name the op, size, dtype and the ranks that did not
// arrive. Gloo over TCP on CPU; the c10d/Gloo types stay in the .cpp files.
#pragma once

#include <ATen/core/Tensor.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cadre::comm {

enum class ReduceOp { Sum, Avg, Max };
const char* reduce_op_name(ReduceOp op);
ReduceOp parse_reduce_op(const std::string& name);  // "sum" | "avg" | "max"; ConfigError otherwise

struct CommOptions {
  // Deadline for each op (and for connecting). A rank missing for longer fails the op.
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // Check (sequence number, generation, op, dtype, numel, reduction/root) across ranks before
  // any data is folded into outputs, so mismatched calls are reported instead of corrupting or
  // hanging. The check rides in the op's own first exchange (comm/inband.h): a small op (up to
  // 256 KiB across the ranks, 128 KiB broadcast) sends its data with it, a larger one sends a
  // 64-byte header to each peer before its ring.
  bool validate = true;
  // After a peer error (a reset connection) before an op's deadline, how long the error's
  // diagnosis looks for ranks that have not reached the op. Negative: two progress-mark intervals
  // plus 250 ms, so a live rank's mark is current and a late rank is named with the op it
  // reached; in-memory recovery wants the error at once (250 ms) and names the lost node itself.
  std::chrono::milliseconds peer_error_diagnosis{-1};
};

// Where the job's rendezvous store is and who this process is. from_env() reads the launcher's
// RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun's names) and, for more than one rank,
// the job secret every store connection must prove (store/secret.h: from `cadre run`, or
// CADRE_JOB_SECRET / CADRE_JOB_SECRET_FILE for ranks launched by hand).
struct JobEnv {
  int rank = 0;
  int world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  std::string secret;
  static JobEnv from_env();
};

// Handle of an issued op. wait() blocks until it finished and rethrows its error.
class Work {
 public:
  Work() = default;
  void wait();
  bool done() const;
  struct State;
  explicit Work(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

class Communicator {
 public:
  // Collective over all ranks of `env`: rank 0 hosts the job store at MASTER_ADDR:MASTER_PORT,
  // so rank 0 must outlive the others' use of any group (end a job with barrier()).
  Communicator(const JobEnv& env, CommOptions options = {});
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const;
  int size() const;
  const std::string& name() const;     // "world" or the sub-group's name
  const char* backend() const;         // "gloo"
  const CommOptions& options() const;
  void set_validate(bool validate);     // takes effect for ops issued afterwards

  // Ops run one after another in issue order on a communication thread; they must be issued
  // in the same order on every rank. Tensors must stay alive and untouched until wait().
  // Reductions of bfloat16/float16 accumulate in float32 and round once.
  Work all_reduce_async(at::Tensor tensor, ReduceOp op = ReduceOp::Sum);
  // output.numel() == size() * input.numel(); rank r's input lands at offset r * input.numel().
  Work all_gather_async(at::Tensor output, at::Tensor input);
  // input.numel() == size() * output.numel(); rank r receives the reduction of chunk r. On the
  // CPU a float32 output may take bfloat16/float16 input: the float32 sum is kept unrounded
  // (the same bits as reducing the input widened to float32, half the bytes on the wire).
  Work reduce_scatter_async(at::Tensor output, at::Tensor input, ReduceOp op = ReduceOp::Sum);
  Work broadcast_async(at::Tensor tensor, int root);
  Work barrier_async();

  void all_reduce(at::Tensor t, ReduceOp op = ReduceOp::Sum) { all_reduce_async(t, op).wait(); }
  void all_gather(at::Tensor out, at::Tensor in) { all_gather_async(out, in).wait(); }
  void reduce_scatter(at::Tensor out, at::Tensor in, ReduceOp op = ReduceOp::Sum) {
    reduce_scatter_async(out, in, op).wait();
  }
  void broadcast(at::Tensor t, int root) { broadcast_async(t, root).wait(); }
  void barrier() { barrier_async().wait(); }

  // True after an op failed: every later op throws until rebuild().
  bool poisoned() const;
  // From any thread: the op in flight (or else the next one) fails at once with `reason`
  // instead of waiting for its deadline, and the communicator is poisoned as by any failure.
  // For a peer known to be gone that nothing reset (a cut link): `cadre run --recovery memory`
  // aborts when its agent reports a lost node.
  void abort(const std::string& reason);
  // Collective: drops the failed connections and connects afresh (new store generation).
  // Every rank of this communicator calls it after a failure.
  void rebuild();

  // Collective over the ranks in `ranks` (sorted, distinct, must include this rank); only
  // those ranks call it. `tag` must be unique per group in the job ("shard0", "replica1").
  // `options` default to this communicator's.
  std::unique_ptr<Communicator> subgroup(const std::vector<int>& ranks, const std::string& tag,
                                         const CommOptions* options = nullptr);

  struct Impl;

 private:
  explicit Communicator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// HYBRID_SHARD layout: ranks [n*k, n*k + k) form node n's shard group; ranks with the same
// local index across nodes form a replica group. Collective over all ranks of `world`.
struct HybridGroups {
  std::unique_ptr<Communicator> shard;    // within a node
  std::unique_ptr<Communicator> replica;  // across nodes
};
HybridGroups make_hybrid_groups(Communicator& world, int ranks_per_node);

// True on every rank iff every rank passed true (an all-reduce of one flag); with no group,
// `ok` itself. Collective.
bool all_ranks_agree(Communicator* group, bool ok);

// Human name of a dtype as the bench prints it ("float", "bfloat16", "half", "int64").
std::string dtype_name(at::ScalarType type);
at::ScalarType parse_dtype(const std::string& name);  // accepts nccl-tests names; ConfigError otherwise

}  // namespace cadre::comm
