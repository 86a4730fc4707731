// ProgressPublisher: in-memory record per op, store write at a low rate on its own thread.
#include "comm/progress.h"

#include <algorithm>

#include "core/error.h"
#include "core/log.h"

namespace cadre::comm {

ProgressPublisher::ProgressPublisher(int rank, std::chrono::milliseconds interval)
    : rank_(rank), interval_(interval), thread_([this] { loop(); }) {}

ProgressPublisher::~ProgressPublisher() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::string ProgressPublisher::key(int rank) { return str("arrive/", rank); }

void ProgressPublisher::set_store(c10::intrusive_ptr<c10d::Store> store) {
  std::lock_guard<std::mutex> lock(mu_);
  store_ = std::move(store);
  seq_ = 0;
  published_seq_ = 0;  // a fresh generation's store has no mark, read as "none"
  description_.clear();
}

void ProgressPublisher::reached(int64_t seq, std::string description) {
  std::lock_guard<std::mutex> lock(mu_);
  seq_ = seq;
  description_ = std::move(description);
}

std::string ProgressPublisher::publish_now() {
  std::unique_lock<std::mutex> lock(mu_);
  return publish_locked(lock);
}

// Called with mu_ held; releases it around the store write (a network round trip).
std::string ProgressPublisher::publish_locked(std::unique_lock<std::mutex>& lock) {
  if (!store_ || seq_ == published_seq_) return {};
  auto store = store_;
  const int64_t seq = seq_;
  std::string value = str(seq, " ", description_);
  lock.unlock();
  std::string error;
  try {
    store->set(key(rank_), std::vector<uint8_t>(value.begin(), value.end()));
  } catch (const std::exception& e) {
    error = str("rank ", rank_, " could not publish its progress (op #", seq, "): ", e.what());
  }
  lock.lock();
  // Only if no new generation began meanwhile.
  if (error.empty() && store_ == store) published_seq_ = std::max(published_seq_, seq);
  return error;
}

void ProgressPublisher::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  bool warned = false;
  while (!stopping_) {
    cv_.wait_for(lock, interval_, [&] { return stopping_; });
    if (stopping_) break;
    // A failed write is retried next interval (the diagnosis then sees an older mark); it is
    // logged once per outage, not once per interval.
    std::string error = publish_locked(lock);
    if (!error.empty() && !warned) log::warn(error);
    warned = !error.empty();
  }
}

}  // namespace cadre::comm
