// Decoding etcd's v3 JSON gateway answers: base64 keys and values, int64 fields as JSON
// strings, omitted zero values, transaction responses, errors and watch stream lines. An
// answer that is not what etcd sends (a proxy, a broken member, a hostile peer) is a
// cadre::Error naming the field, never a JSON library exception or an out-of-range read.
// No network code here, so the decoders can be fuzzed on their own.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>

namespace cadre::rdzv {

// One key-value pair as etcd returns it (revisions decoded).
struct EtcdKv {
  std::string key, value;
  int64_t create_revision = 0, mod_revision = 0, version = 0, lease = 0;
};

std::string base64_encode(const std::string& bytes);
std::string base64_decode(const std::string& text);  // Error on malformed input

// An int64 field: a JSON number or a numeric string; absent or null = 0.
int64_t etcd_int_field(const nlohmann::json& object, const char* name);

EtcdKv etcd_kv_from_json(const nlohmann::json& kv);
// The first kv of a kv/range answer (nullopt when none); *revision gets the header's.
std::optional<EtcdKv> etcd_range_first(const nlohmann::json& answer, int64_t* revision);
// Transaction answers: whether the compare held, the first kv of response i (a range), and
// the store revision in the header.
bool etcd_txn_succeeded(const nlohmann::json& answer);
std::optional<EtcdKv> etcd_txn_range(const nlohmann::json& answer, size_t i);
int64_t etcd_header_revision(const nlohmann::json& answer);
int64_t etcd_keepalive_ttl(const nlohmann::json& answer);  // 0: the lease expired

// An error answer's message (`fallback` when it has none) and gRPC code (0 when none).
struct EtcdErrorInfo {
  std::string message;
  int code = 0;
};
EtcdErrorInfo etcd_error_of(const nlohmann::json& answer, const std::string& fallback);

// One line of a watch stream: nothing yet (created, progress), a change (events or a
// compaction: re-read), or the watch failed (error, canceled).
enum class EtcdWatchLine { Nothing, Changed, Failed };
EtcdWatchLine etcd_watch_line(const std::string& line);

}  // namespace cadre::rdzv
