// Flight recorder: a ring buffer of this process's last N collectives (group, sequence number,
// op, sizes, dtype, issue/start/end times, state), as PyTorch's NCCL flight recorder keeps.
// The ring can live in a file the launcher's agent maps as well (CADRE_FLIGHT_RECORDER_FILE),
// so the agent can read the state of a rank that hangs or is stopped, which cannot dump itself.
// Recording an op costs a few stores into the ring; readers never block the writer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace cadre::obs {

enum class CollectiveState : uint8_t { Scheduled = 1, Started = 2, Completed = 3, Failed = 4 };
const char* collective_state_name(CollectiveState state);  // "scheduled", "started", ...

// What an op is, as its issuer knows it (strings are copied, up to a fixed length).
struct CollectiveInfo {
  const char* group = "world";  // communicator tag
  int group_rank = 0, group_size = 1;
  int generation = 0;           // communicator rebuilds
  const char* op = "";          // "all_reduce", ...
  const char* detail = "";      // "sum", "root 0", ...
  const char* dtype = "";       // libtorch's name: "Float", "BFloat16", ...
  int64_t numel = 0, bytes = 0; // of the input
};

// A consistent copy of one ring entry.
struct CollectiveRecord {
  uint64_t id = 0;              // record number in this process, from 1
  std::string group;
  int group_rank = 0, group_size = 1, generation = 0;
  int64_t seq = -1;             // the group's collective sequence number; -1 until started
  std::string op, detail, dtype;
  int64_t numel = 0, bytes = 0;
  int64_t issued_ns = 0, started_ns = 0, finished_ns = 0;  // wall clock (Unix epoch ns); 0: not yet
  CollectiveState state = CollectiveState::Scheduled;
  std::string describe() const;  // "all_reduce(sum) #12 on world: 3 x Float (12 bytes)"
};

// Per-op running totals of finished collectives.
struct CollectiveTotals {
  std::string op;
  uint64_t count = 0, bytes = 0;
  double seconds = 0;  // start to end on the communication thread
};

struct FlightRecorderState {
  int pid = 0, rank = -1;
  int64_t last_activity_ns = 0;  // the latest issue, start or end, or progressed() (wall clock ns)
  std::vector<CollectiveRecord> records;  // oldest first
  std::vector<CollectiveTotals> totals;
};

class FlightRecorder {
 public:
  // `capacity` entries (0: record nothing). With `file`, the ring lives in that file (created or
  // truncated, mapped shared) so other processes can read it; otherwise in private memory.
  explicit FlightRecorder(size_t capacity, const std::string& file = "");
  ~FlightRecorder();
  FlightRecorder(const FlightRecorder&) = delete;
  FlightRecorder& operator=(const FlightRecorder&) = delete;

  bool enabled() const { return capacity_ > 0; }
  size_t capacity() const { return capacity_; }
  const std::string& file() const { return file_; }
  void set_rank(int rank);

  // On issue (any thread): returns the record's id for the updates below; 0 when disabled.
  uint64_t issued(const CollectiveInfo& info);
  // On the communication thread, when the op starts (its first exchange carries the in-band
  // header check, then the data), with its sequence number and the communicator's generation.
  void started(uint64_t id, int64_t seq, int generation = 0);
  void finished(uint64_t id, bool ok);
  // Progress outside collectives (an evaluation batch): activity for the agent's stall detection
  // without a record, so a long collective-free phase of a healthy rank is not taken for a hang.
  void progressed();

  FlightRecorderState state() const;

  struct Layout;  // the shared memory layout (flight_recorder.cpp)

 private:
  size_t capacity_ = 0;
  std::string file_;
  Layout* layout_ = nullptr;
  size_t mapped_bytes_ = 0;
};

// Reads the ring of another process from its file (the agent): the newest `max_records`
// entries (all by default) and the totals. Throws cadre::Error when the file is missing or is
// not a flight recorder.
FlightRecorderState flight_recorder_read_file(const std::string& file, size_t max_records = SIZE_MAX);

// The process's recorder. First use reads CADRE_FLIGHT_RECORDER_ENTRIES (default 2000; 0 turns
// it off) and CADRE_FLIGHT_RECORDER_FILE; flight_recorder_configure replaces it (call before
// any communicator exists; a replaced recorder stays allocated, as ops in flight may use it).
FlightRecorder& flight_recorder();
void flight_recorder_configure(size_t capacity, const std::string& file);

// Dumps: JSON of the state plus why and when. flight_recorder_set_dump_dir names the directory
// (a run directory's flight_recorder/); dump_now writes <dir>/rank_<R>.json (and returns its
// path, "" when no directory is set), and the same state in PyTorch's dump format as
// <dir>/pytorch_trace_rank_<R> (flight_recorder_torch.h). Safe to call from any thread, never throws.
void flight_recorder_set_dump_dir(const std::string& dir);
std::string flight_recorder_dump_now(const std::string& reason);
std::string flight_recorder_dump_json(const FlightRecorderState& state, const std::string& reason,
                                      const std::string& written_by);

int64_t wall_clock_ns();

}  // namespace cadre::obs

namespace cadre::obs {
// Reads a dump written by flight_recorder_dump_json back. Throws cadre::Error naming the file.
FlightRecorderState flight_recorder_parse_dump(const std::string& text, const std::string& file);
// When a dump was written (its "time_ns"), or 0 when the text is not a dump: an agent reads
// other nodes' dumps from the shared run directory, where a file may be torn or foreign.
int64_t flight_recorder_dump_time_ns(const std::string& text);
}  // namespace cadre::obs
