// Failure diagnosis: after an op fails, which ranks never reached it, read from the progress
// marks every rank publishes to the job store (progress.h), and the error that names them.
#include <algorithm>
#include <cstdlib>
#include <future>
#include <thread>

#include "comm/communicator_impl.h"
#include "core/log.h"
#include "obs/flight_recorder.h"

namespace cadre::comm {

std::chrono::milliseconds progress_interval(std::chrono::milliseconds timeout) {
  return std::clamp(timeout / 4, std::chrono::milliseconds(10), std::chrono::milliseconds(1000));
}

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

// How long the diagnosis looks for ranks that have not arrived. After a timeout: no longer.
// After a peer error before the deadline (a reset connection: the peer died), a live rank's
// progress mark is current within two publishing intervals, and a dead one's never will be:
// waiting out the op's deadline would only delay the error, and with it the recovery, by up
// to the whole timeout (CommOptions::peer_error_diagnosis).
ring::Deadline Communicator::Impl::diagnosis_deadline(ring::Deadline op_deadline) const {
  const std::chrono::milliseconds window = options.peer_error_diagnosis.count() >= 0
                                               ? options.peer_error_diagnosis
                                               : 2 * progress_interval(options.timeout) + std::chrono::milliseconds(250);
  return std::min(op_deadline, std::chrono::steady_clock::now() + window);
}

// Ranks of this group that have not reached op `seq` by `deadline`, from the progress marks
// in the store (read only here, after a failure). A peer error can come before the deadline
// (a rank that left closes its pairs), when live ranks may not have published their mark yet:
// keep looking until `deadline` (diagnosis_deadline). The job store lives on group rank 0's
// host, which may be the host that failed: its calls then wait out their own timeouts (5 s
// each, twice over), so the diagnosis gets a bounded wait and the failure is reported without
// it past that, the reads finishing in the background (they hold copies and shared pointers).
std::string Communicator::Impl::missing_ranks(ring::Deadline deadline) {
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

// An op that failed while data moved (a timeout or a peer's error): the communicator is
// poisoned by the caller; the error names the ranks that never arrived.
void Communicator::Impl::throw_failed(const OpSignature& sig, const std::exception& e, ring::Deadline deadline) {
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

}  // namespace cadre::comm
