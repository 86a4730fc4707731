// Python json.dumps formatting and JSON -> Value conversion (see json.h).
#include "template/json.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "template/text.h"

namespace cadre::tmpl {
namespace {

void escape_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (char32_t c : text::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      out += buf;
    } else if (ensure_ascii && c > 0x7E) {
      if (c >= 0x10000) {  // a surrogate pair, as Python writes it
        const char32_t v = c - 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (v >> 10)),
                      static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
      }
      out += buf;
    } else {
      utf8_append(out, c);
    }
  }
  out += '"';
}

class Writer {
 public:
  explicit Writer(const JsonStyle& style) : style_(style) {}

  void value(const Value& v, int level) {
    switch (v.kind()) {
      case Kind::None: out += "null"; return;
      case Kind::Bool: out += v.as_bool() ? "true" : "false"; return;
      case Kind::Int: out += std::to_string(v.as_int()); return;
      case Kind::Float: number(v.as_float()); return;
      case Kind::String: escape_string(out, v.str_ref(), style_.ensure_ascii); return;
      case Kind::List: list(v.list_ref(), level); return;
      case Kind::Dict: dict(v.dict_ref(), level); return;
      default: throw TemplateError("Object of type " + v.type_name() + " is not JSON serializable", 0);
    }
  }

  std::string out;

 private:
  void number(double f) {
    if (std::isnan(f)) out += "NaN";
    else if (std::isinf(f)) out += f > 0 ? "Infinity" : "-Infinity";
    else out += float_repr(f);
  }

  void newline(int level) {
    if (!style_.indented) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += style_.indent;
  }

  void list(const List& items, int level) {
    if (items.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += style_.item_sep;
      newline(level + 1);
      value(items[i], level + 1);
    }
    newline(level);
    out += ']';
  }

  void dict(const Dict& d, int level) {
    if (d.items.empty()) {
      out += "{}";
      return;
    }
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : d.items) items.push_back(&kv);
    if (style_.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i) out += style_.item_sep;
      newline(level + 1);
      escape_string(out, items[i]->first, style_.ensure_ascii);
      out += style_.key_sep;
      value(items[i]->second, level + 1);
    }
    newline(level);
    out += '}';
  }

  const JsonStyle& style_;
};

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  Writer w(style);
  w.value(v, 0);
  return std::move(w.out);
}

Value from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return Value::none();
    case nlohmann::ordered_json::value_t::boolean: return Value::boolean(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer: return Value::integer(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) throw TemplateError("integer " + std::to_string(u) + " is too large", 0);
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float: return Value::number(j.get<double>());
    case nlohmann::ordered_json::value_t::string: return Value::string(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      List items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      Dict d;
      for (auto it = j.begin(); it != j.end(); ++it) d.set(it.key(), from_json(it.value()));
      return Value::dict(std::move(d));
    }
    default: throw TemplateError("unsupported JSON value", 0);
  }
}

}  // namespace cadre::tmpl
