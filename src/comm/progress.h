// The last collective each rank reached, for the timeout diagnosis only: the communication
// thread records it in memory per op (no I/O), and a background thread copies it to the
// store key `arrive/<rank>` at most once per interval, and only when it changed. A rank whose
// op times out reads the other ranks' keys ("did not arrive: rank 2 (last op reached: ...)");
// an interval well below the timeout keeps them current by then.
#pragma once

#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace cadre::comm {

class ProgressPublisher {
 public:
  ProgressPublisher(int rank, std::chrono::milliseconds interval);
  ~ProgressPublisher();
  ProgressPublisher(const ProgressPublisher&) = delete;
  ProgressPublisher& operator=(const ProgressPublisher&) = delete;

  // A new generation's store (after connect/rebuild): what was reached before is forgotten.
  void set_store(c10::intrusive_ptr<c10d::Store> store);
  // The communication thread reached op `seq` (memory only).
  void reached(int64_t seq, std::string description);
  // Writes the latest record now (before diagnosing a failure); store errors are returned.
  std::string publish_now();

  // The store key of a rank's record; its value is "<seq> <description>".
  static std::string key(int rank);

 private:
  void loop();
  std::string publish_locked(std::unique_lock<std::mutex>& lock);

  const int rank_;
  const std::chrono::milliseconds interval_;
  std::mutex mu_;
  std::condition_variable cv_;
  c10::intrusive_ptr<c10d::Store> store_;
  int64_t seq_ = 0, published_seq_ = -1;
  std::string description_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cadre::comm
