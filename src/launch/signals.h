// SIGINT/SIGTERM/SIGHUP handling for the agent: the handler only records the signal; the
// agent's loops poll it, stop the workers and exit cleanly. SIGHUP (the terminal or the
// session went away) is handled like SIGTERM: its default action would kill the agent at once
// and leave the workers' children behind.
#pragma once

namespace cadre::launch {

void signals_install();      // also ignores SIGPIPE (a closed console must not kill the agent)
int signals_received();      // the last SIGINT/SIGTERM/SIGHUP received, 0 if none
// The signal the workers get when the agent stops on `sig`: SIGINT stays SIGINT; SIGTERM and
// SIGHUP become SIGTERM, which a trainer answers with a checkpoint (a worker has no terminal
// of its own to lose).
int signal_for_workers(int sig);

}  // namespace cadre::launch
