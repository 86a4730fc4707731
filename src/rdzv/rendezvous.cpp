// Rendezvous rounds over a KvStore (see rendezvous.h; protocol in docs/DESIGN.md).
//
// Keys, under cadre/<run_id>/:
//   gen                   job generation g: a run id is reused by starting a new generation
//                         once the previous one finished (succeeded or gave up)
// and under cadre/<run_id>/g<g>/:
//   round                 number of the open or running round (compare_set to move on)
//   r<k>/joined           join counter; an agent's join index is the value it got minus one
//   r<k>/node/<i>         NodeInfo JSON of join index i
//   r<k>/closed           "<n> <restarts>": the first n joiners are the round; set once
//   r<k>/waiting          agents that arrived after the round closed
//   r<k>/hb/<i>           heartbeat counter of join index i (stores without sessions)
//   r<k>/alive/<i>        session key of join index i (stores with sessions, e.g. etcd: it
//                         vanishes when the agent's lease expires); written before node/<i>
//   r<k>/dead/<i>         set by an agent that found join index i silent (heartbeats): the next
//                         round does not wait for it, though its session key may live on
//   r<k>/master           "addr:port" of the workers' master (group rank 0's node)
//   r<k>/end              why the round ended (first writer wins)
//   r<k>/failed           counts failure reports so a round adds at most one restart
//   r<k>/done             nodes whose workers all succeeded
//   restarts              failure restarts so far;  last_failure  JSON of the latest failure
//   left/<k>              agents that exited while the round counter was k
//   finished              set when a round's workers all succeeded, or "failed" when the job gave
//                         up (late agents then leave; a new agent starts generation g+1)
//   agreed/<name>         values the agents settle on (agree_on), e.g. agreed/job_secret with etcd
#include "rdzv/rendezvous.h"

#include <algorithm>
#include <chrono>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/json_number.h"
#include "core/log.h"
#include "rdzv/liveness_port.h"

namespace cadre::rdzv {
namespace {

void sleep_s(double s) { std::this_thread::sleep_for(std::chrono::duration<double>(s)); }

int64_t to_int(const std::string& s, const std::string& what) {
  try {
    return std::stoll(s);
  } catch (const std::exception&) {
    throw Error(str("rendezvous: corrupt value '", s, "' for ", what));
  }
}

}  // namespace

int64_t Round::world_size() const {
  int64_t n = 0;
  for (const auto& node : nodes) n += node.local_world_size;
  return n;
}

int64_t Round::rank_offset() const {
  int64_t n = 0;
  for (int64_t g = 0; g < group_rank; ++g) n += nodes[g].local_world_size;
  return n;
}

std::string node_info_to_json(const NodeInfo& info) {
  return nlohmann::json{{"addr", info.addr}, {"hostname", info.hostname}, {"local_world_size", info.local_world_size},
                        {"node_rank", info.node_rank}, {"pid", info.pid},
                        {"previous_group_rank", info.previous_group_rank}, {"liveness_port", info.liveness_port}}.dump();
}

NodeInfo node_info_from_json(const std::string& text) {
  NodeInfo info;
  try {
    auto j = nlohmann::json::parse(text);
    info.addr = j.at("addr");
    info.hostname = j.at("hostname");
    info.local_world_size = json_int(j.at("local_world_size"), "local_world_size");
    info.node_rank = json_int(j.at("node_rank"), "node_rank");
    info.pid = json_int(j.at("pid"), "pid");
    info.previous_group_rank = j.contains("previous_group_rank") ? json_int(j["previous_group_rank"], "previous_group_rank") : -1;
    if (j.contains("liveness_port")) {
      const int64_t port = json_int(j["liveness_port"], "liveness_port");
      CADRE_CHECK(port >= 0 && port <= 65535, "liveness_port ", port, " is not a port");
      info.liveness_port = static_cast<uint16_t>(port);
    }
  } catch (const std::exception& e) {
    throw Error(str("rendezvous: bad node record '", text, "': ", e.what()));
  }
  return info;
}

Rendezvous::Rendezvous(std::unique_ptr<KvStore> store, RendezvousConfig config)
    : store_(std::move(store)), config_(std::move(config)) {
  const std::string gen_key = "cadre/" + config_.run_id + "/gen";
  store_->compare_set(gen_key, "", "0");
  auto gen = store_->try_get(gen_key);
  CADRE_CHECK(gen, "rendezvous store ", store_->describe(), ": key '", gen_key, "' vanished");
  generation_ = to_int(*gen, gen_key);
  if (auto finished = store_->try_get(key("finished"))) {
    // The job that last used this run id is over: this agent starts (or joins) a new job. The
    // generation before the finished one is deleted; the finished one stays for its late agents.
    int64_t old = generation_;
    generation_ = to_int(store_->compare_set(gen_key, std::to_string(old), std::to_string(old + 1)), gen_key);
    log::info(str("rendezvous: the previous job with run id '", config_.run_id, "' (generation ", old, ") ",
                  *finished == "failed" ? "gave up" : "finished", "; starting a fresh one (generation ",
                  generation_, ")"));
    if (old >= 1) store_->erase_prefix("cadre/" + config_.run_id + "/g" + std::to_string(old - 1) + "/");
  }
  store_->compare_set(key("round"), "", "0");
}

std::string Rendezvous::agree_on(const std::string& name, const std::string& proposal) {
  const std::string k = key("agreed/" + name);
  std::string agreed = store_->compare_set(k, "", proposal);
  CADRE_CHECK(!agreed.empty(), "rendezvous store ", store_->describe(), ": key '", k, "' is empty");
  return agreed;
}

std::string Rendezvous::key(const std::string& suffix) const {
  return "cadre/" + config_.run_id + "/g" + std::to_string(generation_) + "/" + suffix;
}

void Rendezvous::wait_for_change(double max_s) {
  store_->wait_for_change(key(""), std::clamp(max_s, 0.0, 1.0), config_.poll_interval_s);
}

std::optional<int64_t> Rendezvous::gone_member(int64_t round, int64_t members) {
  if (!store_->has_sessions()) return std::nullopt;
  for (int64_t i = 0; i < members; ++i) {
    std::string index = std::to_string(i);
    // node/<i> is written after alive/<i>: a record without its session key means the lease expired.
    if (!store_->try_get(round_key(round, "alive/" + index)) && store_->try_get(round_key(round, "node/" + index)))
      return i;
  }
  return std::nullopt;
}

// Re-forming after a lost node: MAX is out of reach, and waiting out last_call_timeout for
// nodes that are gone would be most of the recovery time. Who is gone is known where the store
// has sessions (an agent's session ends with its connection, or its lease), or at once where an
// agent's liveness port refuses (a killed agent's etcd lease lives on until its TTL): the round
// closes once every live member of the round before and every agent that waited for this one
// joined.
bool Rendezvous::survivors_all_joined(int64_t k, int64_t joined) {
  if (k == 0 || !store_->session_keys_vanish_on_death()) return false;
  const auto previous = store_->try_get(round_key(k - 1, "closed"));
  if (!previous) return false;  // the round before never formed: nobody to wait for in particular
  const int64_t previous_members = to_int(previous->substr(0, previous->find(' ')), "closed");
  std::set<std::pair<std::string, int64_t>> here;  // (hostname, agent pid) of this round's joiners
  for (int64_t i = 0; i < std::min(joined, config_.max_nodes); ++i) {
    auto record = store_->try_get(round_key(k, "node/" + std::to_string(i)));
    if (!record) return false;  // a joiner still writing its record
    const NodeInfo n = node_info_from_json(*record);
    here.emplace(n.hostname, n.pid);
  }
  int64_t expected = store_->add(round_key(k - 1, "waiting"), 0);
  for (int64_t i = 0; i < previous_members; ++i) {
    const std::string index = std::to_string(i);
    if (!store_->try_get(round_key(k - 1, "alive/" + index))) continue;  // gone
    if (store_->try_get(round_key(k - 1, "dead/" + index))) continue;    // silent: its link is cut
    auto record = store_->try_get(round_key(k - 1, "node/" + index));
    if (!record) continue;
    const NodeInfo n = node_info_from_json(*record);
    if (here.count({n.hostname, n.pid})) {
      ++expected;
      continue;
    }
    if (!agent_is_gone(k - 1, i, n)) return false;
  }
  return joined >= expected;
}

bool Rendezvous::agent_is_gone(int64_t round, int64_t index, const NodeInfo& node) {
  if (node.liveness_port == 0) return false;
  if (gone_agents_.count({round, index})) return true;
  // Short: an answer comes in a round trip; a cut host's silence must not hold the round long.
  constexpr double kProbeTimeoutS = 0.2;
  Liveness answer = Liveness::kNoAnswer;
  try {
    answer = probe_liveness(node.addr, node.liveness_port, kProbeTimeoutS);
  } catch (const Error& e) {  // an address that does not resolve here: the deadlines decide, as before
    log::warn(str("rendezvous round ", round + 1, ": probing ", node.hostname, "'s liveness port: ", e.what()));
  }
  if (answer != Liveness::kRefused) return false;
  gone_agents_.insert({round, index});
  log::info(str("rendezvous round ", round + 1, ": not waiting for ", node.hostname, " (agent pid ", node.pid,
                "): nothing listens on its liveness port ", node.addr, ":", node.liveness_port,
                " any more, its process is gone"));
  return true;
}

std::string Rendezvous::round_key(int64_t round, const std::string& suffix) const {
  return key("r" + std::to_string(round) + "/" + suffix);
}

int64_t Rendezvous::current_round() {
  auto v = store_->try_get(key("round"));
  CADRE_CHECK(v, "rendezvous store ", store_->describe(), ": key 'round' vanished");
  return to_int(*v, "round");
}

Round Rendezvous::join_next_round(const NodeInfo& me, const std::function<bool()>& interrupted) {
  double deadline = now_s() + config_.join_timeout_s;
  int64_t waited_in = -1;  // round we registered as waiting in
  for (;;) {
    if (interrupted()) throw Interrupted{};
    if (store_->try_get(key("finished"))) throw JobFinished{};
    int64_t k = current_round();
    auto closed = store_->try_get(round_key(k, "closed"));
    int64_t index = -1;
    if (!closed) {
      index = store_->add(round_key(k, "joined"), 1) - 1;
      if (index < config_.max_nodes) {
        store_->set_session_key(round_key(k, "alive/" + std::to_string(index)), me.hostname);
        store_->set(round_key(k, "node/" + std::to_string(index)), node_info_to_json(me));
      }
    }
    // Wait for the round to close (or find we are late for it).
    double min_reached_at = -1;
    bool late = index < 0 || index >= config_.max_nodes;
    while (!late) {
      if (interrupted()) throw Interrupted{};
      closed = store_->try_get(round_key(k, "closed"));
      if (closed) break;
      if (current_round() != k) break;  // round abandoned while forming: join the next one
      int64_t joined = store_->add(round_key(k, "joined"), 0);
      int64_t restarts = store_->add(key("restarts"), 0);
      if (joined >= config_.max_nodes) {
        store_->compare_set(round_key(k, "closed"), "", str(config_.max_nodes, " ", restarts));
        continue;
      }
      if (joined >= config_.min_nodes) {
        if (min_reached_at < 0) min_reached_at = now_s();
        if (now_s() - min_reached_at >= config_.last_call_timeout_s || survivors_all_joined(k, joined))
          store_->compare_set(round_key(k, "closed"), "", str(joined, " ", restarts));
        else
          wait_for_change(min_reached_at + config_.last_call_timeout_s - now_s());
        continue;
      }
      if (now_s() > deadline)
        throw Error(str("rendezvous '", config_.run_id, "' round ", k, ": only ", joined, " of the minimum ",
                        config_.min_nodes, " nodes joined within ", config_.join_timeout_s,
                        " s (join_timeout); store ", store_->describe()));
      wait_for_change(deadline - now_s());
    }
    if (!late && !closed) continue;  // round abandoned
    if (late && index >= 0 && !closed) {
      // We took a slot past MAX, so the round is full: close it as its joiners would (they may be
      // gone, e.g. a job killed while forming), so its members are known and can be checked.
      closed = store_->compare_set(round_key(k, "closed"), "", str(config_.max_nodes, " ", store_->add(key("restarts"), 0)));
    }
    int64_t members = 0, restarts = 0;
    if (closed) {
      auto space = closed->find(' ');
      members = to_int(closed->substr(0, space), "closed");
      restarts = to_int(closed->substr(space + 1), "closed");
    }
    if (late || index >= members) {
      // Late: announce ourselves (running agents scale up if below MAX) and wait for round k+1.
      if (waited_in != k) {
        store_->add(round_key(k, "waiting"), 1);
        waited_in = k;
        log::info(str("rendezvous round ", k, " is running with ", members,
                      " nodes; waiting for the next round"));
      }
      while (current_round() == k) {
        if (interrupted()) throw Interrupted{};
        if (store_->try_get(key("finished"))) throw JobFinished{};
        if (auto gone = gone_member(k, members)) {
          // A stale round (its agents died, e.g. a killed job restarted with the same run id, or
          // this very agent restarting): end it rather than wait for agents that will never act.
          std::string reason = str("stale round: the agent with join index ", *gone, " is gone (session expired)");
          log::info(str("rendezvous round ", k, ": ", reason, "; ending it"));
          store_->compare_set(round_key(k, "end"), "", reason);
          store_->compare_set(key("round"), std::to_string(k), std::to_string(k + 1));
          break;
        }
        wait_for_change(1.0);
      }
      deadline = now_s() + config_.join_timeout_s;
      continue;
    }
    // A member: read everyone's record and order by group rank.
    std::vector<std::pair<int64_t, NodeInfo>> members_by_index;
    for (int64_t i = 0; i < members; ++i) {
      std::optional<std::string> record;
      while (!(record = store_->try_get(round_key(k, "node/" + std::to_string(i))))) {
        if (interrupted()) throw Interrupted{};
        CADRE_CHECK(now_s() < deadline, "rendezvous round ", k, ": node record ", i, " never appeared");
        wait_for_change(deadline - now_s());
      }
      members_by_index.emplace_back(i, node_info_from_json(*record));
    }
    if (!config_.rank_by_node_rank) {
      // Nodes keep their group ranks across restarts where they can (workers keep their ranks,
      // and with them any node-local state); newcomers follow in join order.
      auto key_of = [](const std::pair<int64_t, NodeInfo>& m) {
        int64_t prev = m.second.previous_group_rank;
        return std::make_pair(prev < 0 ? INT64_MAX : prev, m.first);
      };
      std::stable_sort(members_by_index.begin(), members_by_index.end(),
                       [&](const auto& a, const auto& b) { return key_of(a) < key_of(b); });
    } else {
      std::sort(members_by_index.begin(), members_by_index.end(),
                [](const auto& a, const auto& b) { return a.second.node_rank < b.second.node_rank; });
      for (int64_t g = 0; g < members; ++g)
        CADRE_CHECK(members_by_index[g].second.node_rank == g, "rendezvous round ", k, ": node ranks must be 0..",
                    members - 1, " and distinct; node ", members_by_index[g].second.hostname, " (pid ",
                    members_by_index[g].second.pid, ") has --node-rank ", members_by_index[g].second.node_rank);
    }
    Round round;
    round.number = k;
    round.restart_count = restarts;
    round.join_index = index;
    for (int64_t g = 0; g < members; ++g) {
      round.nodes.push_back(members_by_index[g].second);
      round.join_indices.push_back(members_by_index[g].first);
      if (members_by_index[g].first == index) round.group_rank = g;
    }
    return round;
  }
}

void Rendezvous::publish_master(const Round& round, const std::string& addr, uint16_t port) {
  store_->set(round_key(round.number, "master"), addr + ":" + std::to_string(port));
}

std::pair<std::string, uint16_t> Rendezvous::wait_master(const Round& round, const std::function<bool()>& interrupted) {
  double deadline = now_s() + config_.join_timeout_s;
  for (;;) {
    if (auto v = store_->try_get(round_key(round.number, "master"))) {
      auto colon = v->rfind(':');
      return {v->substr(0, colon), static_cast<uint16_t>(to_int(v->substr(colon + 1), "master"))};
    }
    if (interrupted()) throw Interrupted{};
    if (current_round() != round.number) throw RoundEnded{};
    if (auto gone = gone_member(round.number, round.group_world_size())) {
      // E.g. a killed job's agent still counted in the round we closed: it will never publish
      // or run. End the round so the living re-form without it.
      std::string reason = str("the agent with join index ", *gone, " is gone (session expired) before the round started");
      end_round(round, reason, false, "");
      throw RoundEnded{};
    }
    CADRE_CHECK(now_s() < deadline, "rendezvous round ", round.number, ": group rank 0 (",
                round.nodes[0].hostname, ") never published the master address");
    wait_for_change(deadline - now_s());
  }
}

void Rendezvous::heartbeat(const Round& round) {
  if (store_->has_sessions()) return;  // the store keeps the session alive (alive/<i>)
  double now = now_s();
  if (beats_round_ == round.number && now - last_beat_at_ < config_.heartbeat_timeout_s / 10) return;
  last_beat_at_ = now;
  store_->add(round_key(round.number, "hb/" + std::to_string(round.join_index)), 1);
}

RoundStatus Rendezvous::poll(const Round& round) {
  RoundStatus status;
  if (current_round() != round.number) {
    status.ended = true;
    status.end_reason = store_->try_get(round_key(round.number, "end")).value_or("unknown");
    status.workers_alive = store_->try_get(round_key(round.number, "end_alive")).value_or("0") == "1";
    return status;
  }
  status.waiting_nodes = store_->add(round_key(round.number, "waiting"), 0);
  double now = now_s();
  if (beats_round_ != round.number) {
    beats_round_ = round.number;
    beats_.clear();
    last_scan_at_ = -1;
  } else if (now - last_scan_at_ < config_.heartbeat_timeout_s / 10) {
    return status;
  }
  last_scan_at_ = now;
  for (int64_t g = 0; g < round.group_world_size(); ++g) {
    int64_t index = round.join_indices[g];
    if (index == round.join_index) continue;
    if (store_->has_sessions()) {
      if (!store_->try_get(round_key(round.number, "alive/" + std::to_string(index)))) {
        status.dead.push_back(g);
        status.dead_why = str("lost its session (", store_->describe(), " lease expired or revoked)");
      }
      continue;
    }
    if (store_->session_keys_vanish_on_death() &&
        !store_->try_get(round_key(round.number, "alive/" + std::to_string(index)))) {
      status.dead.push_back(g);
      status.dead_why = str("is gone (its connection to the rendezvous store ", store_->describe(), " closed)");
      continue;
    }
    int64_t value = store_->add(round_key(round.number, "hb/" + std::to_string(index)), 0);
    Beat& beat = beats_[index];
    if (value != beat.value) {
      beat.value = value;
      beat.changed_at = now;
    } else if (now - beat.changed_at > config_.heartbeat_timeout_s) {
      status.dead.push_back(g);
      status.dead_why = "stopped heartbeating";
    }
  }
  return status;
}

void Rendezvous::declare_dead(const Round& round, const std::vector<int64_t>& group_ranks, const std::string& why) {
  for (int64_t g : group_ranks) store_->set(round_key(round.number, "dead/" + std::to_string(round.join_indices[g])), why);
}

void Rendezvous::end_round(const Round& round, const std::string& reason, bool is_failure, const std::string& failure_json,
                           bool workers_alive) {
  if (is_failure && store_->add(round_key(round.number, "failed"), 1) == 1) {
    store_->set(key("last_failure"), failure_json);
    store_->add(key("restarts"), 1);
  }
  // Written before the end, first writer wins like the end itself: an agent that sees the end
  // also sees how to stop its workers.
  store_->compare_set(round_key(round.number, "end_alive"), "", workers_alive && !is_failure ? "1" : "0");
  store_->compare_set(round_key(round.number, "end"), "", reason);
  store_->compare_set(key("round"), std::to_string(round.number), std::to_string(round.number + 1));
}

int64_t Rendezvous::restart_count() { return store_->add(key("restarts"), 0); }

std::string Rendezvous::last_failure() { return store_->try_get(key("last_failure")).value_or(""); }

void Rendezvous::mark_done(const Round& round) { store_->add(round_key(round.number, "done"), 1); }

bool Rendezvous::all_done(const Round& round) {
  return store_->add(round_key(round.number, "done"), 0) >= round.group_world_size();
}

void Rendezvous::mark_job_finished(const Round& round) { store_->set(key("finished"), std::to_string(round.number)); }

void Rendezvous::mark_job_failed() { store_->set(key("finished"), "failed"); }

void Rendezvous::announce_exit() { store_->add(key("left/" + std::to_string(current_round())), 1); }

void Rendezvous::wait_for_others_to_exit(int64_t expected, double linger_s) {
  double deadline = now_s() + linger_s;
  int64_t k = current_round();
  while (store_->add(key("left/" + std::to_string(k)), 0) < expected && now_s() < deadline) sleep_s(config_.poll_interval_s);
}

}  // namespace cadre::rdzv
