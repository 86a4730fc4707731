// What observability costs the training thread, measured directly (bench/obs_overhead.py sets it
// against a step's time): a flight-recorder entry per collective (issue, start, finish into the
// shared file), the per-step report (JSON over the local channel, an agent thread reading it),
// and the straggler bookkeeping on the loss all-reduce. Prints one JSON object.
//   build/bin/obs_cost [world_size=2]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "obs/flight_recorder.h"
#include "obs/step_timer.h"
#include "obs/straggler_tracker.h"
#include "obs/worker_channel.h"
#include "obs/worker_report.h"

using Clock = std::chrono::steady_clock;

template <typename Fn>
double best_ns_per_call(int calls, Fn&& fn) {
  double best = 1e300;
  for (int round = 0; round < 5; ++round) {
    auto t0 = Clock::now();
    for (int i = 0; i < calls; ++i) fn(i);
    best = std::min(best, std::chrono::duration<double, std::nano>(Clock::now() - t0).count() / calls);
  }
  return best;
}

int main(int argc, char** argv) {
  using namespace cadre::obs;
  const int world = argc > 1 ? std::atoi(argv[1]) : 2;
  const std::string file = (std::filesystem::temp_directory_path() / "cadre-obs-cost.bin").string();
  FlightRecorder recorder(2000, file);
  CollectiveInfo info;
  info.op = "reduce_scatter";
  info.detail = "avg";
  info.dtype = "BFloat16";
  info.numel = 1 << 20;
  info.bytes = 2 << 20;
  const double record_ns = best_ns_per_call(200000, [&](int i) {
    uint64_t id = recorder.issued(info);
    recorder.started(id, i);
    recorder.finished(id, true);
  });
  std::filesystem::remove(file);

  ChannelReceiver receiver;
  ChannelSender sender(receiver.name());
  bool stop = false;
  std::thread agent([&] {
    while (!stop) receiver.receive(std::chrono::milliseconds(50));
  });
  WorkerReport report;
  report.run_dir = "/some/run/directory";
  report.straggler_cause = "compute-bound";
  const double report_ns = best_ns_per_call(20000, [&](int i) {
    report.step = i;
    report.loss = 3.0 + i * 1e-6;
    sender.send(report.to_json());
  });
  stop = true;
  agent.join();

  StragglerTracker tracker;
  std::vector<RankTimes> times(size_t(world), RankTimes{0.5, 0.1, 0.001});
  std::vector<float> slots(size_t(3 * world));
  StepTimer timer;
  timer.start();
  const double straggler_ns = best_ns_per_call(100000, [&](int i) {
    StepSplit s = timer.split();
    for (int r = 0; r < world; ++r) slots[3 * r] = float(s.compute_s + r);
    for (int r = 0; r < world; ++r) times[r] = {slots[3 * r], slots[3 * r + 1], slots[3 * r + 2]};
    tracker.update(i, times);
  });
  std::printf("{\"world\": %d, \"record_ns_per_collective\": %.1f, \"report_ns_per_step\": %.1f, "
              "\"straggler_ns_per_step\": %.1f, \"dropped_reports\": %lld}\n",
              world, record_ns, report_ns, straggler_ns, static_cast<long long>(sender.dropped()));
  return 0;
}
