// Interruptible waits of a communication thread (see interrupt.h).
#include "comm/interrupt.h"

#include <gloo/transport/unbound_buffer.h>

#include <algorithm>

#include "core/error.h"

namespace cadre::comm {
namespace {

thread_local Interrupt* bound = nullptr;

std::chrono::milliseconds remaining(ring::Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return std::max(left, std::chrono::milliseconds(1));  // Gloo reads 0 as "its own default"
}

// Registered with the bound interrupt for the length of one wait.
class Registration {
 public:
  Registration(gloo::transport::UnboundBuffer& buffer, bool receiving) : buffer_(&buffer) {
    if (bound) bound->enter(buffer_, receiving);
  }
  ~Registration() {
    if (bound) bound->leave(buffer_);
  }
  Registration(const Registration&) = delete;
  Registration& operator=(const Registration&) = delete;

 private:
  gloo::transport::UnboundBuffer* buffer_;
};

// Gloo returns false only when the wait was aborted, which only fire() does.
void check_completed(bool completed, const char* what) {
  if (completed) return;
  throw Error(str(what, " aborted: ", bound ? bound->reason() : std::string("no reason given")));
}

}  // namespace

void Interrupt::fire(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!fired_) reason_ = reason;
  fired_ = true;
  for (const Waiting& w : waiting_) {
    if (w.receiving) w.buffer->abortWaitRecv();
    else w.buffer->abortWaitSend();
  }
}

bool Interrupt::fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

std::string Interrupt::reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return reason_;
}

void Interrupt::reset() {
  std::lock_guard<std::mutex> lock(mu_);
  fired_ = false;
  reason_.clear();
}

void Interrupt::enter(gloo::transport::UnboundBuffer* buffer, bool receiving) {
  std::lock_guard<std::mutex> lock(mu_);
  CADRE_CHECK(!fired_, receiving ? "receive" : "send", " aborted: ", reason_);
  waiting_.push_back({buffer, receiving});
}

void Interrupt::leave(gloo::transport::UnboundBuffer* buffer) {
  std::lock_guard<std::mutex> lock(mu_);
  waiting_.erase(std::remove_if(waiting_.begin(), waiting_.end(), [&](const Waiting& w) { return w.buffer == buffer; }),
                 waiting_.end());
}

void bind_interrupt(Interrupt* interrupt) { bound = interrupt; }

void wait_recv(gloo::transport::UnboundBuffer& buffer, ring::Deadline deadline) {
  Registration registered(buffer, /*receiving=*/true);
  check_completed(buffer.waitRecv(nullptr, remaining(deadline)), "receive");
}

void wait_send(gloo::transport::UnboundBuffer& buffer, ring::Deadline deadline) {
  Registration registered(buffer, /*receiving=*/false);
  check_completed(buffer.waitSend(nullptr, remaining(deadline)), "send");
}

}  // namespace cadre::comm
