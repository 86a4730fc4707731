// The Communicator's insides, shared by the files that implement it: the op's signature and
// plan, the errors that decide whether a failure poisons the communicator, and Impl, which owns
// a generation's Gloo context and the communication thread that runs ops in issue order
// (communicator_impl.cpp), diagnoses failures (diagnosis.cpp) and is driven by the collectives
// (collectives.cpp) and the public class (comm.cpp). Internal to src/comm.
#pragma once

#include <gloo/rendezvous/context.h>
#include <gloo/transport/device.h>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "comm/comm.h"
#include "comm/inband.h"
#include "comm/interrupt.h"
#include "comm/nccl_group.h"
#include "comm/progress.h"
#include "comm/ring.h"
#include "comm/work_state.h"
#include "core/error.h"

namespace cadre::comm {

enum class OpKind : int64_t { AllReduce = 1, AllGather, ReduceScatter, Broadcast, Barrier };
const char* op_kind_name(OpKind kind);

// What one rank is about to do; compared across ranks before data moves.
struct OpSignature {
  OpKind kind = OpKind::Barrier;
  at::ScalarType dtype = at::kByte;
  int64_t numel = 0;    // elements of the input
  int64_t detail = 0;   // reduction or root
  uint64_t record = 0;  // its flight-recorder entry
  std::string describe() const;
};

// How an op moves its data. With validation on, an op whose data fits a header's payload
// (`payload_for` set) sends it in the header exchange and finishes in `complete`; any other
// op exchanges headers alone first and then runs `move`, as an op without validation does.
struct OpPlan {
  inband::PayloadFor payload_for;
  std::function<void(const inband::Received&)> complete;
  std::function<void(uint64_t slot, ring::Deadline)> move;
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

// How often a rank's progress record reaches the store: often enough to be current when an
// op times out, rare enough to cost nothing per op.
std::chrono::milliseconds progress_interval(std::chrono::milliseconds timeout);

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

  ~Impl();

  // Connects the first generation and starts the communication thread.
  void start();
  // Queues `body` for the communication thread; its Work finishes when it returns or throws.
  Work submit(std::function<void()> body);
  // Connects generation `generation` through the store (on the communication thread).
  void connect();
  // Runs one op on the communication thread: header exchange (with the data of a small op) and
  // cross-rank check when validating, then data movement.
  void run(const OpSignature& sig, const OpPlan& plan);
  // The op's flight-recorder entry, on the issuing thread.
  uint64_t record_issue(const OpSignature& sig);
  // The NCCL group, made by the first collective on CUDA tensors.
  NcclGroup& nccl_group();
  std::string where() const;

 private:
  void loop();
  inband::Header header_for(const OpSignature& sig) const;
  void check_headers(const OpSignature& sig, const std::vector<inband::Header>& headers) const;
  [[noreturn]] void throw_aborted(const OpSignature& sig, bool began);
  [[noreturn]] void throw_failed(const OpSignature& sig, const std::exception& e, ring::Deadline deadline);
  // Failure diagnosis from the progress marks (diagnosis.cpp).
  ring::Deadline diagnosis_deadline(ring::Deadline op_deadline) const;
  std::string missing_ranks(ring::Deadline deadline);
};

}  // namespace cadre::comm
