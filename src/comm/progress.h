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
#include <memory>
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
  // What the publishing thread uses. It may outlive the publisher: a write to the store of a cut
  // host blocks up to the store's timeout, and neither this communicator's destruction nor the
  // re-formation of its group (in-memory recovery) may wait for that; the thread then finishes
  // the write on its own, detached, and exits.
  struct Shared {
    int rank;
    std::chrono::milliseconds interval;
    std::mutex mu;
    std::condition_variable cv;
    c10::intrusive_ptr<c10d::Store> store;
    int64_t seq = 0, published_seq = -1;
    std::string description;
    bool stopping = false;
    bool thread_writing = false;  // the thread is in a store write (mu released)
  };
  static void loop(const std::shared_ptr<Shared>& s);
  static std::string publish_locked(Shared& s, std::unique_lock<std::mutex>& lock);

  std::shared_ptr<Shared> s_;
  std::thread thread_;
};

}  // namespace cadre::comm
