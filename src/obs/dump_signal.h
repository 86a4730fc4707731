// SIGUSR1 -> a flight-recorder dump (flight_recorder_dump_now), written by a thread of its own:
// the signal handler only writes a byte to a pipe. While an object lives, SIGUSR1 no longer
// ends the process; afterwards it is ignored (if it was not handled before) rather than fatal.
#pragma once

#include <signal.h>

#include <thread>

namespace cadre::obs {

class DumpOnSignal {
 public:
  DumpOnSignal();
  ~DumpOnSignal();
  DumpOnSignal(const DumpOnSignal&) = delete;
  DumpOnSignal& operator=(const DumpOnSignal&) = delete;

 private:
  int pipe_[2] = {-1, -1};
  struct sigaction previous_ {};
  std::thread thread_;
};

}  // namespace cadre::obs
