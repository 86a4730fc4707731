// Cadre's flight-recorder state written in PyTorch's flight-recorder dump format (torch 2.11's
// c10d FlightRecorder::dump, read by torch/distributed/flight_recorder/components/loader.py and
// builder.py), so PyTorch's analyzer can match collectives across ranks and name the ranks that
// did not join one. The mapping:
// - Only the job-wide group ("world", ranks 0..size-1; desc "default_pg" as PyTorch names its
//   default group) is written. A sub-group's member ranks are not in the ring, and the analyzer
//   needs every group's membership from every rank, so sub-groups are left out.
// - Only ops that started on the communication thread are written: an op issued but not
//   started has no sequence number yet (its seq is -1), and the analyzer matches ops across
//   ranks by collective_seq_id.
// - record_id and op_id are the group's sequence number: the same op has the same number on
//   every rank, which the analyzer's alignment of rings that start at different ops relies on
//   (Cadre's own record ids count every group's ops in the process).
// - profiling_name is "nccl:<op>" (the analyzer accepts only "nccl:" and "xccl:"; Cadre's
//   collectives run over its TCP transport, not NCCL); a barrier is "nccl:all_reduce_barrier",
//   the name PyTorch's NCCL barrier has.
// - Sizes: Cadre records an op's input element count; input_sizes is [[numel]], output_sizes is
//   [[numel * group size]] for all_gather, [[numel / group size]] for reduce_scatter, else the
//   input's. Dtypes are libtorch's names ("Float"), as PyTorch writes them.
// - state: "scheduled", "started" or "completed"; a failed op is "completed" and retired (the
//   format has no failed state). Times are wall-clock ns; no stack frames.
#include "obs/flight_recorder_torch.h"

#include <algorithm>

#include "core/error.h"
#include "core/python_pickle.h"

namespace cadre::obs {
namespace {

const char* torch_state(CollectiveState s) {
  switch (s) {
    case CollectiveState::Scheduled: return "scheduled";
    case CollectiveState::Started: return "started";
    case CollectiveState::Completed:
    case CollectiveState::Failed: return "completed";
  }
  return "scheduled";
}

std::string profiling_name(const std::string& op) {
  return "nccl:" + (op == "barrier" ? std::string("all_reduce_barrier") : op);
}

void sizes(PickleWriter& p, int64_t numel) {
  p.mark().mark().integer(numel).list().list();  // [[numel]]
}

void dtypes(PickleWriter& p, const std::string& dtype) {
  p.mark();
  if (!dtype.empty()) p.string(dtype);
  p.list();
}

void time_or_none(PickleWriter& p, int64_t ns) {
  if (ns > 0) p.integer(ns);
  else p.none();
}

}  // namespace

std::string flight_recorder_torch_dump_path(const std::string& dir, int rank) {
  return str(dir, "/pytorch_trace_rank_", rank);
}

std::string flight_recorder_torch_dump(const FlightRecorderState& state) {
  CADRE_CHECK(state.rank >= 0, "flight recorder: a PyTorch-format dump needs the rank (pid ", state.pid, ")");
  const std::string group = "world", desc = "default_pg";
  std::vector<const CollectiveRecord*> records;
  int group_size = 0;
  for (const auto& r : state.records)
    if (r.group == group && r.seq >= 0) {
      records.push_back(&r);
      group_size = std::max(group_size, r.group_size);
    }
  std::stable_sort(records.begin(), records.end(),
                   [](const CollectiveRecord* a, const CollectiveRecord* b) { return a->seq < b->seq; });

  PickleWriter p;
  p.mark();
  p.string("version").string(kTorchFlightRecorderVersion);
  p.string("comm_lib_version").string("cadre");
  // pg_config: {name: {"name", "desc", "ranks": "[0, 1, ...]"}}, ranks as PyTorch writes them: a string.
  p.string("pg_config").mark();
  if (group_size > 0) {
    std::string ranks = "[";
    for (int r = 0; r < group_size; ++r) ranks += (r ? ", " : "") + std::to_string(r);
    ranks += "]";
    p.string(group).mark();
    p.string("name").string(group).string("desc").string(desc).string("ranks").string(ranks);
    p.dict();
  }
  p.dict();
  p.string("pg_status").mark().dict();
  p.string("entries").mark();
  for (const CollectiveRecord* r : records) {
    const bool done = r->state == CollectiveState::Completed || r->state == CollectiveState::Failed;
    const int64_t out_numel = r->op == "all_gather"       ? r->numel * r->group_size
                              : r->op == "reduce_scatter" ? r->numel / std::max(r->group_size, 1)
                                                          : r->numel;
    p.mark();
    p.string("record_id").integer(r->seq);
    p.string("pg_id").integer(0);
    p.string("process_group").mark().string(group).string(desc).tuple();
    p.string("thread_name").string("cadre communication");
    p.string("thread_id").string(std::to_string(state.pid));
    p.string("collective_seq_id").integer(r->seq);
    p.string("p2p_seq_id").integer(0);
    p.string("op_id").integer(r->seq);
    p.string("profiling_name").string(profiling_name(r->op));
    p.string("time_created_ns").integer(r->issued_ns);
    p.string("input_sizes");
    sizes(p, r->numel);
    p.string("input_dtypes");
    dtypes(p, r->dtype);
    p.string("output_sizes");
    sizes(p, out_numel);
    p.string("output_dtypes");
    dtypes(p, r->dtype);
    p.string("state").string(torch_state(r->state));
    p.string("time_discovered_started_ns");
    time_or_none(p, r->started_ns);
    p.string("time_discovered_completed_ns");
    time_or_none(p, done ? r->finished_ns : 0);
    p.string("retired").boolean(done);
    p.string("timeout_ms").integer(0);
    p.string("is_p2p").boolean(false);
    p.string("frames").mark().list();
    p.dict();
  }
  p.list();
  p.dict();
  return p.finish();
}

}  // namespace cadre::obs
