// Parsing and naming of typed config fields.
#include "core/config_fields.h"

#include <cmath>
#include <cstdio>
#include <type_traits>

#include "core/error.h"

namespace cadre {

void field_assign(const Field& field, const std::string& text, const std::string& source) {
  auto bad = [&](const char* expected) {
    throw ConfigError(str(source, ": key '", field.key, "' expects ", expected, ", got '", text, "'"));
  };
  std::visit(
      [&](auto* ptr) {
        using T = std::remove_pointer_t<decltype(ptr)>;
        if constexpr (std::is_same_v<T, std::string>) {
          *ptr = text;
        } else if constexpr (std::is_same_v<T, Strategy>) {
          *ptr = parse_strategy(text);  // its ConfigError names the key and the valid names
        } else if constexpr (std::is_same_v<T, bool>) {
          if (text == "true" || text == "True") *ptr = true;
          else if (text == "false" || text == "False") *ptr = false;
          else bad("true or false");
        } else if constexpr (std::is_same_v<T, int64_t>) {
          size_t used = 0;
          long long v = 0;
          try { v = std::stoll(text, &used); } catch (const std::exception&) { bad("an integer"); }
          if (used != text.size()) bad("an integer");
          *ptr = v;
        } else {
          size_t used = 0;
          double v = 0;
          try { v = std::stod(text, &used); } catch (const std::exception&) { bad("a finite number"); }
          // inf and nan would pass range checks such as `> 0` (or fail them with a misleading message).
          if (used != text.size() || !std::isfinite(v)) bad("a finite number");
          *ptr = v;
        }
      },
      field.ptr);
}

std::string field_text(const Field& field) {
  return std::visit(
      [](auto* ptr) -> std::string {
        using T = std::remove_pointer_t<decltype(ptr)>;
        if constexpr (std::is_same_v<T, std::string>) return *ptr;
        else if constexpr (std::is_same_v<T, Strategy>) return strategy_name(*ptr);
        else if constexpr (std::is_same_v<T, bool>) return *ptr ? "true" : "false";
        else if constexpr (std::is_same_v<T, int64_t>) return std::to_string(*ptr);
        else {
          // Shortest text that reads back as the same double.
          char buf[32];
          for (int precision = 6; precision <= 17; ++precision) {
            std::snprintf(buf, sizeof buf, "%.*g", precision, *ptr);
            if (std::stod(buf) == *ptr) break;
          }
          return buf;
        }
      },
      field.ptr);
}

const Field& field_find(const std::vector<Field>& fields, const std::string& key, const std::string& source) {
  for (const auto& f : fields)
    if (f.key == key) return f;
  // Name the section's keys so a typo is easy to fix.
  std::string section = key.substr(0, key.find('.'));
  std::string known;
  for (const auto& f : fields)
    if (f.key.compare(0, section.size() + 1, section + ".") == 0) known += " " + f.key;
  if (known.empty()) {
    for (const auto& f : fields) {
      std::string s = f.key.substr(0, f.key.find('.'));
      if (known.find(" " + s + " ") == std::string::npos) known += " " + s + " ";
    }
    throw ConfigError(str(source, ": unknown section in key '", key, "'; sections are:", known));
  }
  throw ConfigError(str(source, ": unknown key '", key, "'; keys in '", section, "' are:", known));
}

void fields_apply(const std::vector<Field>& fields, const std::vector<RawKey>& keys) {
  for (const auto& k : keys) field_assign(field_find(fields, k.key, k.source), k.value, k.source);
}

std::vector<RawKey> fields_dump(const std::vector<Field>& fields, const std::string& source) {
  std::vector<RawKey> out;
  for (const auto& f : fields) out.push_back({f.key, field_text(f), source});
  return out;
}

}  // namespace cadre
