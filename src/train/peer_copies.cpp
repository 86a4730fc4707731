// Copies of each rank's sharded state in a peer's memory (peer_copies.h).
#include "train/peer_copies.h"

#include <algorithm>
#include <set>
#include <utility>

#include "core/error.h"

namespace cadre {
namespace {

// The rank `rank` sends its copies to: the same local rank on the next node, or the next rank
// when all ranks share one node (a worker's failure is still covered, a node's is not).
int buddy_of(int rank, int world, int ranks_per_node) {
  const int step = ranks_per_node >= 1 && ranks_per_node < world ? ranks_per_node : 1;
  return (rank + step) % world;
}

std::string what(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "an exception that is not a std::exception";
  }
}

// Index of `rank` in the pair {a, b} (sorted): the root it broadcasts as.
int index_in_pair(int rank, int other) { return rank < other ? 0 : 1; }

}  // namespace

PeerCopies::PeerCopies(comm::Communicator& group, int ranks_per_node) : rank_(group.rank()) {
  const int world = group.size();
  CADRE_CHECK(world >= 2, "peer copies need at least 2 ranks");
  buddy_ = buddy_of(rank_, world, ranks_per_node);
  giver_ = (rank_ - (buddy_of(0, world, ranks_per_node)) + world) % world;
  // Every pair (r, buddy of r), built in one global order: a rank is never waiting for one
  // pair while its partner waits for another.
  std::set<std::pair<int, int>> pairs;
  for (int r = 0; r < world; ++r) {
    const int b = buddy_of(r, world, ranks_per_node);
    pairs.insert({std::min(r, b), std::max(r, b)});
  }
  for (const auto& [a, b] : pairs) {
    if (a != rank_ && b != rank_) continue;
    auto pair = group.subgroup({a, b}, str("peer-copy-", a, "-", b));
    const int other = a == rank_ ? b : a;
    if (other == buddy_) to_buddy_ = std::move(pair);
    else from_giver_ = std::move(pair);
  }
  if (!from_giver_) CADRE_CHECK(giver_ == buddy_, "rank ", rank_, ": no pair communicator with giver ", giver_);
  communicators_ = {to_buddy_.get()};
  if (from_giver_) communicators_.push_back(from_giver_.get());
}

PeerCopies::~PeerCopies() {
  if (!thread_.joinable()) return;
  for (comm::Communicator* c : communicators_) c->abort("the peer copies are dropped");
  join();
}

void PeerCopies::join() {
  if (thread_.joinable()) thread_.join();
}

void PeerCopies::start(PackedState state, comm::Communicator& group) {
  if (pending()) {
    join();
    CADRE_CHECK(comm::all_ranks_agree(&group, done_.load()), "rank ", rank_, ": the in-memory copies of step ",
                pending_own_->step, " did not reach every peer", error_ ? " (here: " + what(error_) + ")" : "");
    commit();
  }
  pending_own_ = std::move(state);
  done_ = false;
  error_ = nullptr;
  thread_ = std::thread([this] { exchange(); });
}

// Sends this rank's pending copy to its buddy and receives its giver's. With one communicator
// for both (buddy == giver) both ranks issue the lower rank's send first.
void PeerCopies::exchange() {
  std::optional<PackedSend> send;
  try {
    comm::Communicator& out = *to_buddy_;
    comm::Communicator& in = from_giver_ ? *from_giver_ : *to_buddy_;
    const int my_root = index_in_pair(rank_, buddy_), giver_root = index_in_pair(giver_, rank_);
    if (from_giver_ || my_root == 0) send.emplace(*pending_own_, out, my_root);
    PackedState received = receive_packed(in, giver_root);
    if (!send) send.emplace(*pending_own_, out, my_root);
    send->wait();
    CADRE_CHECK(received.owner == giver_ && received.step == pending_own_->step, "rank ", rank_,
                ": received the copy of rank ", received.owner, " at step ", received.step, " instead of rank ",
                giver_, "'s at step ", pending_own_->step);
    pending_received_ = std::move(received);  // read only after join()
    done_ = true;
  } catch (const std::exception&) {
    error_ = std::current_exception();
    // The send's buffers must outlive its ops, which end at once on a failed (poisoned)
    // communicator; their error is this one's consequence, and error_ already holds the cause.
    if (send) {
      try {
        send->wait();
      } catch (const std::exception&) {  // the consequence; the cause is in error_
      }
    }
  }
}

void PeerCopies::commit() {
  join();
  CADRE_CHECK(done_.load(), "rank ", rank_, ": commit of in-memory copies this rank did not complete");
  kept_own_ = std::move(pending_own_);
  kept_received_ = std::move(pending_received_);
  pending_own_.reset();
  pending_received_.reset();
}

std::vector<PackedState> PeerCopies::release() {
  if (thread_.joinable() && !done_.load())
    for (comm::Communicator* c : communicators_) c->abort("the group is re-forming");
  join();
  std::vector<PackedState> out;
  for (auto* s : {&kept_own_, &kept_received_, &pending_own_, &pending_received_})
    if (s->has_value()) out.push_back(std::move(**s));
  kept_own_.reset();
  kept_received_.reset();
  pending_own_.reset();
  pending_received_.reset();
  return out;
}

}  // namespace cadre
