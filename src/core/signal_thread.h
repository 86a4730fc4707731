// Process-directed signals handled on one thread of their own. oneDNN's JIT float32 GEMM points
// the stack pointer at heap memory while it runs (oneDNN issue #4845): a signal handler run on
// that thread pushes its frame there and corrupts the heap. CI saw it as a SIGTERM during
// training that ended a rank in "corrupted size vs. prev_size" inside dnnl_sgemm, or a segfault
// later. The kernel delivers a process-directed signal to a thread that does not block it, so
// with the signals blocked everywhere but on one waiting thread, handlers run only there.
#pragma once

#include <initializer_list>

namespace cadre {

// Blocks `signals` in the calling thread (and so in every thread it or its threads start from
// now on) and starts a detached thread that leaves them unblocked and only waits. Call it first
// thing, before any thread starts: a thread started earlier keeps its mask. A forked child gets
// the mask back (pthread_atfork), so programs it runs receive the signals as usual. Handlers
// are installed as before, with sigaction; default actions (ending the process) are unchanged.
void route_signals_to_one_thread(std::initializer_list<int> signals);

}  // namespace cadre
