// The local channel from workers to their agent: Unix datagram sockets in Linux's abstract
// namespace (no file to clean up, no network listener per worker). The agent binds a name and
// hands it to its workers as CADRE_METRICS_SOCKET; a worker sends one JSON message per step.
// Sending never blocks: when the agent is slow or gone the message is dropped (the reports
// carry running totals, so a lost one loses nothing but its moment).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace cadre::obs {

class ChannelSender {
 public:
  // Connects to `name` (as in CADRE_METRICS_SOCKET). Throws cadre::Error when nobody listens.
  explicit ChannelSender(const std::string& name);
  ~ChannelSender();
  ChannelSender(const ChannelSender&) = delete;
  ChannelSender& operator=(const ChannelSender&) = delete;

  // True when the message was handed to the kernel; false when dropped.
  bool send(const std::string& message);
  int64_t dropped() const { return dropped_; }

 private:
  int fd_ = -1;
  int64_t dropped_ = 0;
};

class ChannelReceiver {
 public:
  // Binds a fresh unique name (see name()).
  ChannelReceiver();
  ~ChannelReceiver();
  ChannelReceiver(const ChannelReceiver&) = delete;
  ChannelReceiver& operator=(const ChannelReceiver&) = delete;

  const std::string& name() const { return name_; }
  // Messages that arrived within `timeout` (at least one waited for, then all that are queued).
  std::vector<std::string> receive(std::chrono::milliseconds timeout);

 private:
  int fd_ = -1;
  std::string name_;
};

}  // namespace cadre::obs
