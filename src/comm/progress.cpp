// ProgressPublisher: in-memory record per op, store write at a low rate on its own thread.
#include "comm/progress.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace cadre::comm {

ProgressPublisher::ProgressPublisher(int rank, std::chrono::milliseconds interval)
    : s_(std::make_shared<Shared>()) {
  s_->rank = rank;
  s_->interval = interval;
  thread_ = std::thread([s = s_] { loop(s); });
}

ProgressPublisher::~ProgressPublisher() {
  bool writing = false;
  {
    std::lock_guard<std::mutex> lock(s_->mu);
    s_->stopping = true;  // no write starts after this
    writing = s_->thread_writing;
  }
  s_->cv.notify_all();
  if (writing) thread_.detach();
  else thread_.join();
}

std::string ProgressPublisher::key(int rank) { return str("arrive/", rank); }

void ProgressPublisher::set_store(c10::intrusive_ptr<c10d::Store> store) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->store = std::move(store);
  s_->seq = 0;
  s_->published_seq = 0;  // a fresh generation's store has no mark, read as "none"
  s_->description.clear();
}

void ProgressPublisher::reached(int64_t seq, std::string description) {
  std::lock_guard<std::mutex> lock(s_->mu);
  s_->seq = seq;
  s_->description = std::move(description);
}

std::string ProgressPublisher::publish_now() {
  std::unique_lock<std::mutex> lock(s_->mu);
  return publish_locked(*s_, lock);
}

// Called with s.mu held; releases it around the store write (a network round trip).
std::string ProgressPublisher::publish_locked(Shared& s, std::unique_lock<std::mutex>& lock) {
  if (!s.store || s.seq == s.published_seq) return {};
  auto store = s.store;
  const int64_t seq = s.seq;
  std::string value = str(seq, " ", s.description);
  lock.unlock();
  std::string error;
  try {
    store->set(key(s.rank), std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    error = str("rank ", s.rank, " could not publish its progress (op #", seq, "): ", e.what());
  }
  lock.lock();
  // Only if no new generation began meanwhile.
  if (error.empty() && s.store == store) s.published_seq = std::max(s.published_seq, seq);
  return error;
}

void ProgressPublisher::loop(const std::shared_ptr<Shared>& s) {
  std::unique_lock<std::mutex> lock(s->mu);
  bool warned = false;
  while (!s->stopping) {
    s->cv.wait_for(lock, s->interval, [&] { return s->stopping; });
    if (s->stopping) break;
    s->thread_writing = true;
    std::string error = publish_locked(*s, lock);
    s->thread_writing = false;
    if (s->stopping) break;  // perhaps detached: the communicator is gone and so is the interest
    // A failed write is retried next interval (the diagnosis then sees an older mark); it is
    // logged once per outage, not once per interval.
    if (!error.empty() && !warned) log::warn(error);
    warned = !error.empty();
  }
}

}  // namespace cadre::comm
