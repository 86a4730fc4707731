// etcd gateway answer decoding (see etcd_answer.h).
#include "rdzv/etcd_answer.h"

#include <charconv>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace cadre::rdzv {
namespace {

using json = nlohmann::json;

const char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

// Runs a decoder; what the JSON library throws on a wrong type becomes an Error naming `what`.
template <typename Fn>
auto decoding(const char* what, Fn&& fn) {
  try {
    return fn();
  } catch (const json::exception& e) {
    throw Error(str("etcd: malformed answer (", what, "): ", e.what()));
  }
}

// The object member `name` when `j` is an object that has it, else nullptr.
const json* member(const json& j, const char* name) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(name);
  return it == j.end() ? nullptr : &*it;
}

std::string string_field(const json& j, const char* name) {
  const json* v = member(j, name);
  if (!v || v->is_null()) return "";
  if (!v->is_string()) throw Error(str("etcd: field '", name, "' is not a string: ", v->dump().substr(0, 100)));
  return v->get<std::string>();
}

}  // namespace

std::string base64_encode(const std::string& in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    uint32_t v = (uint8_t(in[i]) << 16) | (uint8_t(in[i + 1]) << 8) | uint8_t(in[i + 2]);
    for (int s : {18, 12, 6, 0}) out += kBase64[(v >> s) & 63];
  }
  size_t rest = in.size() - i;
  if (rest > 0) {
    uint32_t v = uint8_t(in[i]) << 16;
    if (rest == 2) v |= uint8_t(in[i + 1]) << 8;
    out += kBase64[(v >> 18) & 63];
    out += kBase64[(v >> 12) & 63];
    out += rest == 2 ? kBase64[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

std::string base64_decode(const std::string& in) {
  auto value = [&](char c) -> uint32_t {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    throw Error(str("etcd: malformed base64 '", in.substr(0, 100), "'"));
  };
  CADRE_CHECK(in.size() % 4 == 0, "etcd: malformed base64 '", in.substr(0, 100), "' (length ", in.size(), ")");
  std::string out;
  for (size_t i = 0; i < in.size(); i += 4) {
    // Padding only at the very end: "=" in the middle of the text is malformed.
    const bool last = i + 4 == in.size();
    int pad = last ? (in[i + 3] == '=') + (in[i + 3] == '=' && in[i + 2] == '=') : 0;
    uint32_t v = (value(in[i]) << 18) | (value(in[i + 1]) << 12);
    if (pad < 2) v |= value(in[i + 2]) << 6;
    if (pad < 1) v |= value(in[i + 3]);
    // Bits below the last whole byte must be zero: otherwise two texts ("zdg=", "zdj=") decode
    // to the same bytes and what Cadre wrote back would not be what the peer sent.
    CADRE_CHECK((v & (pad == 2 ? 0xffffu : pad == 1 ? 0xffu : 0u)) == 0, "etcd: malformed base64 '",
                in.substr(0, 100), "' (bits after its last byte are not zero)");
    out += char((v >> 16) & 0xff);
    if (pad < 2) out += char((v >> 8) & 0xff);
    if (pad < 1) out += char(v & 0xff);
  }
  return out;
}

int64_t etcd_int_field(const json& j, const char* name) {
  const json* v = member(j, name);
  if (!v || v->is_null()) return 0;
  if (v->is_number_integer()) return v->get<int64_t>();
  if (v->is_string()) {
    const std::string s = v->get<std::string>();
    int64_t out = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    if (ec == std::errc() && end == s.data() + s.size()) return out;
  }
  throw Error(str("etcd: field '", name, "' is neither an integer nor an integer string: ", v->dump().substr(0, 100)));
}

EtcdKv etcd_kv_from_json(const json& kv) {
  if (!kv.is_object()) throw Error("etcd: a key-value entry is not an object: " + kv.dump().substr(0, 100));
  EtcdKv out;
  out.key = base64_decode(string_field(kv, "key"));
  out.value = base64_decode(string_field(kv, "value"));
  out.create_revision = etcd_int_field(kv, "create_revision");
  out.mod_revision = etcd_int_field(kv, "mod_revision");
  out.version = etcd_int_field(kv, "version");
  out.lease = etcd_int_field(kv, "lease");
  return out;
}

std::optional<EtcdKv> etcd_range_first(const json& answer, int64_t* revision) {
  if (revision) *revision = etcd_header_revision(answer);
  const json* kvs = member(answer, "kvs");
  if (!kvs || kvs->is_null()) return std::nullopt;
  if (!kvs->is_array()) throw Error("etcd: 'kvs' is not a list: " + kvs->dump().substr(0, 100));
  if (kvs->empty()) return std::nullopt;
  return etcd_kv_from_json((*kvs)[0]);
}

bool etcd_txn_succeeded(const json& answer) {
  const json* v = member(answer, "succeeded");
  if (!v || v->is_null()) return false;  // omitted: false
  if (!v->is_boolean()) throw Error("etcd: 'succeeded' is not a boolean: " + v->dump().substr(0, 100));
  return v->get<bool>();
}

std::optional<EtcdKv> etcd_txn_range(const json& answer, size_t i) {
  const json* responses = member(answer, "responses");
  if (!responses || !responses->is_array() || i >= responses->size()) return std::nullopt;
  const json* range = member((*responses)[i], "response_range");
  if (!range) return std::nullopt;
  return etcd_range_first(*range, nullptr);
}

int64_t etcd_header_revision(const json& answer) {
  const json* header = member(answer, "header");
  return header ? etcd_int_field(*header, "revision") : 0;
}

int64_t etcd_keepalive_ttl(const json& answer) {
  const json* result = member(answer, "result");
  return result ? etcd_int_field(*result, "TTL") : 0;
}

EtcdErrorInfo etcd_error_of(const json& answer, const std::string& fallback) {
  return decoding("error", [&] {
    EtcdErrorInfo info;
    info.message = fallback;
    for (const char* name : {"message", "error"})
      if (const json* m = member(answer, name); m && m->is_string()) {
        info.message = m->get<std::string>();
        break;
      }
    if (const json* c = member(answer, "code"); c && c->is_number_integer()) info.code = c->get<int>();
    return info;
  });
}

EtcdWatchLine etcd_watch_line(const std::string& text) {
  json line = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!line.is_object()) return EtcdWatchLine::Nothing;
  const json* result = member(line, "result");
  const json& r = result ? *result : line;
  const json* canceled = member(r, "canceled");
  if (member(r, "error") || (canceled && canceled->is_boolean() && canceled->get<bool>())) return EtcdWatchLine::Failed;
  const json* events = member(r, "events");
  if ((events && events->is_array() && !events->empty()) || member(r, "compact_revision")) return EtcdWatchLine::Changed;
  return EtcdWatchLine::Nothing;
}

}  // namespace cadre::rdzv
