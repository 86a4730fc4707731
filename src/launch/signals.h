// SIGINT/SIGTERM handling for the agent: the handler only records the signal; the agent's loops
// poll it, forward it to the workers and exit cleanly.
#pragma once

namespace cadre::launch {

void signals_install();      // also ignores SIGPIPE (a closed console must not kill the agent)
int signals_received();      // the last SIGINT/SIGTERM received, 0 if none

}  // namespace cadre::launch
