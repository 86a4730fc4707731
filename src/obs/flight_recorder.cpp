// The flight recorder's ring (see flight_recorder.h). Each entry is guarded by a sequence lock:
// a writer makes its version odd, writes, and makes it even again; a reader copies the entry
// and keeps the copy only if the version was even and unchanged. Writers of one entry are the
// issuing thread and then the communication thread, one after the other; they meet only when
// the ring wraps around an op still in flight, and then the later one waits its turn.
#include "obs/flight_recorder.h"
#include "obs/flight_recorder_torch.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.h"
#include "core/file_util.h"
#include "core/log.h"
#include "obs/json_fields.h"

namespace cadre::obs {

int64_t wall_clock_ns() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

const char* collective_state_name(CollectiveState state) {
  switch (state) {
    case CollectiveState::Scheduled: return "scheduled";
    case CollectiveState::Started: return "started";
    case CollectiveState::Completed: return "completed";
    case CollectiveState::Failed: return "failed";
  }
  return "?";
}

std::string CollectiveRecord::describe() const {
  std::string s = op;
  if (!detail.empty()) s += "(" + detail + ")";
  s += str(" #", seq, " on ", group);
  if (op != "barrier") s += str(": ", numel, " x ", dtype, " (", bytes, " bytes)");
  return s;
}

namespace {

constexpr char kMagic[8] = {'C', 'A', 'D', 'R', 'E', 'F', 'R', '1'};
constexpr uint32_t kLayoutVersion = 1;
// Totals are kept per op name; anything else lands in the last slot.
constexpr const char* kOps[] = {"all_reduce", "all_gather", "reduce_scatter", "broadcast", "barrier", "other"};
constexpr int kOpCount = sizeof(kOps) / sizeof(kOps[0]);

int op_index(const char* op) {
  for (int i = 0; i + 1 < kOpCount; ++i)
    if (!std::strcmp(op, kOps[i])) return i;
  return kOpCount - 1;
}

template <size_t N>
void copy_text(char (&to)[N], const char* from) {
  std::strncpy(to, from ? from : "", N - 1);
  to[N - 1] = 0;
}

struct alignas(64) Entry {
  std::atomic<uint32_t> version;
  uint8_t state;
  uint64_t id;
  int64_t seq;
  int32_t group_rank, group_size, generation;
  int64_t numel, bytes;
  int64_t issued_ns, started_ns, finished_ns;
  char group[40], op[16], detail[16], dtype[16];
};

struct OpTotalsRaw {
  std::atomic<uint64_t> count, bytes, ns;
};

}  // namespace

struct FlightRecorder::Layout {
  char magic[8];
  uint32_t layout_version;
  uint32_t capacity;
  int32_t pid;
  std::atomic<int32_t> rank;
  std::atomic<uint64_t> next_id;           // ids handed out so far
  std::atomic<int64_t> last_activity_ns;
  OpTotalsRaw totals[kOpCount];
  alignas(64) char entries_start[1];

  Entry* entries() { return reinterpret_cast<Entry*>(reinterpret_cast<char*>(this) + offset()); }
  const Entry* entries() const {
    return reinterpret_cast<const Entry*>(reinterpret_cast<const char*>(this) + offset());
  }
  static size_t offset() { return offsetof(Layout, entries_start); }
  static size_t bytes_for(size_t capacity) { return offset() + capacity * sizeof(Entry); }
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared-memory atomics must be lock-free");

uint32_t entry_lock(Entry& e) {
  for (;;) {
    uint32_t v = e.version.load(std::memory_order_relaxed);
    if (!(v & 1) && e.version.compare_exchange_weak(v, v + 1, std::memory_order_acquire)) return v + 1;
    std::this_thread::yield();
  }
}
void entry_unlock(Entry& e, uint32_t locked) { e.version.store(locked + 1, std::memory_order_release); }

// A consistent copy of `e`, or false when it stays mid-write (its writer may be stopped).
bool entry_read(const Entry& e, CollectiveRecord* out) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    uint32_t v1 = e.version.load(std::memory_order_acquire);
    if (v1 & 1) {
      std::this_thread::yield();
      continue;
    }
    Entry copy;
    std::memcpy(static_cast<void*>(&copy), static_cast<const void*>(&e), sizeof(Entry));
    std::atomic_thread_fence(std::memory_order_acquire);
    if (e.version.load(std::memory_order_relaxed) != v1) continue;
    if (copy.id == 0) return false;  // never written
    out->id = copy.id;
    out->group.assign(copy.group, strnlen(copy.group, sizeof copy.group));
    out->group_rank = copy.group_rank;
    out->group_size = copy.group_size;
    out->generation = copy.generation;
    out->seq = copy.seq;
    out->op.assign(copy.op, strnlen(copy.op, sizeof copy.op));
    out->detail.assign(copy.detail, strnlen(copy.detail, sizeof copy.detail));
    out->dtype.assign(copy.dtype, strnlen(copy.dtype, sizeof copy.dtype));
    out->numel = copy.numel;
    out->bytes = copy.bytes;
    out->issued_ns = copy.issued_ns;
    out->started_ns = copy.started_ns;
    out->finished_ns = copy.finished_ns;
    out->state = static_cast<CollectiveState>(copy.state);
    return true;
  }
  return false;
}

FlightRecorderState read_layout(const FlightRecorder::Layout& l, size_t max_records = SIZE_MAX) {
  FlightRecorderState s;
  s.pid = l.pid;
  s.rank = l.rank.load();
  s.last_activity_ns = l.last_activity_ns.load();
  const uint64_t next = l.next_id.load(std::memory_order_acquire);
  const uint64_t kept = std::min<uint64_t>(l.capacity, max_records);
  const uint64_t first = next > kept ? next - kept + 1 : 1;
  for (uint64_t id = first; id <= next; ++id) {
    CollectiveRecord r;
    // An entry overwritten meanwhile carries a newer id: it is skipped here and read in turn.
    if (entry_read(l.entries()[(id - 1) % l.capacity], &r) && r.id == id) s.records.push_back(std::move(r));
  }
  for (int i = 0; i < kOpCount; ++i) {
    CollectiveTotals t;
    t.op = kOps[i];
    t.count = l.totals[i].count.load();
    t.bytes = l.totals[i].bytes.load();
    t.seconds = double(l.totals[i].ns.load()) * 1e-9;
    if (t.count) s.totals.push_back(t);
  }
  return s;
}

}  // namespace

FlightRecorder::FlightRecorder(size_t capacity, const std::string& file) : capacity_(capacity), file_(file) {
  if (capacity_ == 0) return;
  mapped_bytes_ = Layout::bytes_for(capacity_);
  void* memory = MAP_FAILED;
  if (file_.empty()) {
    memory = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  } else {
    int fd = ::open(file_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CADRE_CHECK(fd >= 0, "flight recorder: cannot create '", file_, "': ", std::strerror(errno));
    if (::ftruncate(fd, off_t(mapped_bytes_)) == 0)
      memory = ::mmap(nullptr, mapped_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int err = errno;
    ::close(fd);
    CADRE_CHECK(memory != MAP_FAILED, "flight recorder: cannot map '", file_, "' (", mapped_bytes_, " bytes): ",
                std::strerror(err));
  }
  CADRE_CHECK(memory != MAP_FAILED, "flight recorder: cannot allocate ", mapped_bytes_, " bytes: ", std::strerror(errno));
  // Fresh pages are zero: every atomic starts at 0 and every entry is unwritten (id 0).
  layout_ = static_cast<Layout*>(memory);
  layout_->layout_version = kLayoutVersion;
  layout_->capacity = static_cast<uint32_t>(capacity_);
  layout_->pid = static_cast<int32_t>(::getpid());
  layout_->rank.store(-1);
  std::atomic_thread_fence(std::memory_order_release);
  std::memcpy(layout_->magic, kMagic, sizeof kMagic);  // last: a reader trusts nothing before it
}

FlightRecorder::~FlightRecorder() {
  if (layout_) ::munmap(layout_, mapped_bytes_);
}

void FlightRecorder::set_rank(int rank) {
  if (layout_) layout_->rank.store(rank);
}

uint64_t FlightRecorder::issued(const CollectiveInfo& info) {
  if (!layout_) return 0;
  const int64_t now = wall_clock_ns();
  const uint64_t id = layout_->next_id.fetch_add(1, std::memory_order_acq_rel) + 1;
  Entry& e = layout_->entries()[(id - 1) % capacity_];
  uint32_t v = entry_lock(e);
  e.id = id;
  e.state = static_cast<uint8_t>(CollectiveState::Scheduled);
  e.seq = -1;
  e.group_rank = info.group_rank;
  e.group_size = info.group_size;
  e.generation = info.generation;
  e.numel = info.numel;
  e.bytes = info.bytes;
  e.issued_ns = now;
  e.started_ns = 0;
  e.finished_ns = 0;
  copy_text(e.group, info.group);
  copy_text(e.op, info.op);
  copy_text(e.detail, info.detail);
  copy_text(e.dtype, info.dtype);
  entry_unlock(e, v);
  layout_->last_activity_ns.store(now, std::memory_order_relaxed);
  return id;
}

void FlightRecorder::started(uint64_t id, int64_t seq, int generation) {
  if (!layout_ || id == 0) return;
  const int64_t now = wall_clock_ns();
  Entry& e = layout_->entries()[(id - 1) % capacity_];
  uint32_t v = entry_lock(e);
  if (e.id == id) {
    e.seq = seq;
    e.generation = generation;
    e.started_ns = now;
    e.state = static_cast<uint8_t>(CollectiveState::Started);
  }
  entry_unlock(e, v);
  layout_->last_activity_ns.store(now, std::memory_order_relaxed);
}

void FlightRecorder::progressed() {
  if (layout_) layout_->last_activity_ns.store(wall_clock_ns(), std::memory_order_relaxed);
}

void FlightRecorder::finished(uint64_t id, bool ok) {
  if (!layout_ || id == 0) return;
  const int64_t now = wall_clock_ns();
  Entry& e = layout_->entries()[(id - 1) % capacity_];
  uint32_t v = entry_lock(e);
  int64_t started = 0, bytes = 0;
  char op[sizeof e.op];
  bool mine = e.id == id;
  if (mine) {
    e.finished_ns = now;
    e.state = static_cast<uint8_t>(ok ? CollectiveState::Completed : CollectiveState::Failed);
    started = e.started_ns ? e.started_ns : e.issued_ns;
    bytes = e.bytes;
    std::memcpy(op, e.op, sizeof op);
  }
  entry_unlock(e, v);
  layout_->last_activity_ns.store(now, std::memory_order_relaxed);
  if (mine && ok) {
    OpTotalsRaw& t = layout_->totals[op_index(op)];
    t.count.fetch_add(1, std::memory_order_relaxed);
    t.bytes.fetch_add(uint64_t(bytes), std::memory_order_relaxed);
    t.ns.fetch_add(uint64_t(now - started), std::memory_order_relaxed);
  }
}

FlightRecorderState FlightRecorder::state() const {
  if (!layout_) {
    FlightRecorderState s;
    s.pid = static_cast<int>(::getpid());
    return s;
  }
  return read_layout(*layout_);
}

FlightRecorderState flight_recorder_read_file(const std::string& file, size_t max_records) {
  int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  CADRE_CHECK(fd >= 0, "flight recorder '", file, "': cannot open: ", std::strerror(errno));
  struct stat st {};
  ::fstat(fd, &st);
  const size_t size = size_t(st.st_size);
  if (size < FlightRecorder::Layout::offset()) {
    ::close(fd);
    throw Error(str("flight recorder '", file, "': ", size, " bytes is too small to be one"));
  }
  void* memory = ::mmap(nullptr, size, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  CADRE_CHECK(memory != MAP_FAILED, "flight recorder '", file, "': cannot map: ", std::strerror(errno));
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { ::munmap(p, n); }
  } unmap{memory, size};
  const auto& layout = *static_cast<const FlightRecorder::Layout*>(memory);
  CADRE_CHECK(std::memcmp(layout.magic, kMagic, sizeof kMagic) == 0 && layout.layout_version == kLayoutVersion &&
                  FlightRecorder::Layout::bytes_for(layout.capacity) <= size,
              "flight recorder '", file, "': not a flight recorder of this version (or not written yet)");
  return read_layout(layout, max_records);
}

// ---------------------------------------------------------------------------------------------
// The process's recorder and its dumps

namespace {

std::mutex g_mutex;
std::atomic<FlightRecorder*> g_recorder{nullptr};
std::vector<std::unique_ptr<FlightRecorder>>* g_all = nullptr;  // replaced ones stay alive
std::string g_dump_dir;

size_t env_capacity() {
  const char* v = std::getenv("CADRE_FLIGHT_RECORDER_ENTRIES");
  if (!v || !*v) return 2000;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return end && *end == 0 && n >= 0 ? size_t(n) : 2000;
}

void install(std::unique_ptr<FlightRecorder> recorder) {
  if (!g_all) g_all = new std::vector<std::unique_ptr<FlightRecorder>>();  // lives to the end
  g_recorder.store(recorder.get(), std::memory_order_release);
  g_all->push_back(std::move(recorder));
}

}  // namespace

FlightRecorder& flight_recorder() {
  if (FlightRecorder* r = g_recorder.load(std::memory_order_acquire)) return *r;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (!g_recorder.load()) {
    const char* file = std::getenv("CADRE_FLIGHT_RECORDER_FILE");
    install(std::make_unique<FlightRecorder>(env_capacity(), file ? file : ""));
  }
  return *g_recorder.load();
}

void flight_recorder_configure(size_t capacity, const std::string& file) {
  std::lock_guard<std::mutex> lock(g_mutex);
  install(std::make_unique<FlightRecorder>(capacity, file));
}

void flight_recorder_set_dump_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_dump_dir = dir;
}

std::string flight_recorder_dump_json(const FlightRecorderState& state, const std::string& reason,
                                      const std::string& written_by) {
  nlohmann::json entries = nlohmann::json::array();
  for (const auto& r : state.records)
    entries.push_back({{"id", r.id}, {"group", r.group}, {"group_rank", r.group_rank}, {"group_size", r.group_size},
                       {"generation", r.generation}, {"seq", r.seq}, {"op", r.op}, {"detail", r.detail},
                       {"dtype", r.dtype}, {"numel", r.numel}, {"bytes", r.bytes}, {"issued_ns", r.issued_ns},
                       {"started_ns", r.started_ns}, {"finished_ns", r.finished_ns},
                       {"state", collective_state_name(r.state)}});
  nlohmann::json totals = nlohmann::json::object();
  for (const auto& t : state.totals) totals[t.op] = {{"count", t.count}, {"bytes", t.bytes}, {"seconds", t.seconds}};
  nlohmann::json j = {{"format", "cadre-flight-recorder"}, {"version", 1},       {"rank", state.rank},
                      {"pid", state.pid},                    {"reason", reason},  {"written_by", written_by},
                      {"time_ns", wall_clock_ns()},          {"last_activity_ns", state.last_activity_ns},
                      {"entries", entries},                  {"totals", totals}};
  return j.dump(1) + "\n";
}

std::string flight_recorder_dump_now(const std::string& reason) {
  std::string dir;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    dir = g_dump_dir;
  }
  if (dir.empty()) return "";
  try {
    FlightRecorderState state = flight_recorder().state();
    std::filesystem::create_directories(dir);
    std::string path = str(dir, "/rank_", state.rank, ".json");
    file_write_atomic(path, flight_recorder_dump_json(state, reason, "self"));
    // The same state in PyTorch's format, for its analyzer (flight_recorder_torch.h).
    if (state.rank >= 0) file_write_atomic(flight_recorder_torch_dump_path(dir, state.rank), flight_recorder_torch_dump(state));
    return path;
  } catch (const std::exception& e) {
    log::warn(str("flight recorder: dump to ", dir, " failed: ", e.what()));
    return "";
  }
}

}  // namespace cadre::obs

namespace cadre::obs {

FlightRecorderState flight_recorder_parse_dump(const std::string& text, const std::string& file) {
  auto j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  CADRE_CHECK(j.is_object() && j.value("format", "") == "cadre-flight-recorder", "flight recorder dump '", file,
              "': not a Cadre flight-recorder dump");
  FlightRecorderState s;
  try {
    s.rank = j.at("rank");
    s.pid = j.at("pid");
    s.last_activity_ns = j.at("last_activity_ns");
    for (const auto& e : j.at("entries")) {
      CollectiveRecord r;
      r.id = e.at("id");
      r.group = e.at("group");
      r.group_rank = e.at("group_rank");
      r.group_size = e.at("group_size");
      r.generation = e.at("generation");
      r.seq = e.at("seq");
      r.op = e.at("op");
      r.detail = e.at("detail");
      r.dtype = e.at("dtype");
      r.numel = e.at("numel");
      r.bytes = e.at("bytes");
      r.issued_ns = e.at("issued_ns");
      r.started_ns = e.at("started_ns");
      r.finished_ns = e.at("finished_ns");
      const std::string state = e.at("state");
      r.state = state == "completed" ? CollectiveState::Completed
                : state == "failed"  ? CollectiveState::Failed
                : state == "started" ? CollectiveState::Started
                                     : CollectiveState::Scheduled;
      s.records.push_back(std::move(r));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(str("flight recorder dump '", file, "': ", e.what()));
  }
  return s;
}

int64_t flight_recorder_dump_time_ns(const std::string& text) {
  return json_integer(nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false), "time_ns", 0);
}

}  // namespace cadre::obs
