// YAML output for manifests through yaml-cpp's emitter, with quoting decided here: yaml-cpp
// writes "9464" or "true" plain, which readers take for a number or a boolean.
#include "deploy/yaml_writer.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>

#include "core/error.h"

namespace cadre::deploy {
namespace {

// Plain scalars a YAML 1.1 or 1.2 reader may resolve to something other than a string.
bool needs_quotes(const std::string& s) {
  if (s.empty()) return true;
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  static const char* words[] = {"true", "false", "yes", "no", "on", "off", "y", "n", "null", "~", ".inf", ".nan"};
  for (const char* w : words)
    if (lower == w) return true;
  char c = s[0];
  return std::isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+' || c == '.' || c == '$';
}

void emit(YAML::Emitter& out, const Manifest& v) {
  switch (v.type()) {
    case Manifest::value_t::object:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginMap << YAML::EndMap;
        break;
      }
      out << YAML::BeginMap;
      for (const auto& [key, value] : v.items()) {
        out << YAML::Key;
        if (needs_quotes(key)) out << YAML::DoubleQuoted;
        out << key << YAML::Value;
        emit(out, value);
      }
      out << YAML::EndMap;
      break;
    case Manifest::value_t::array:
      if (v.empty()) {
        out << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
        break;
      }
      out << YAML::BeginSeq;
      for (const auto& item : v) emit(out, item);
      out << YAML::EndSeq;
      break;
    case Manifest::value_t::string: {
      const auto& s = v.get_ref<const std::string&>();
      if (s.find('\n') != std::string::npos) out << YAML::Literal;
      else if (needs_quotes(s)) out << YAML::DoubleQuoted;
      out << s;
      break;
    }
    case Manifest::value_t::boolean: out << v.get<bool>(); break;
    case Manifest::value_t::number_integer: out << v.get<int64_t>(); break;
    case Manifest::value_t::number_unsigned: out << v.get<uint64_t>(); break;
    case Manifest::value_t::number_float: out << v.get<double>(); break;
    case Manifest::value_t::null: out << YAML::Null; break;
    default: CADRE_CHECK(false, "manifest value of unexpected type ", v.type_name());
  }
}

}  // namespace

std::string yaml_write(const std::vector<Manifest>& documents) {
  std::string text;
  for (const auto& doc : documents) {
    YAML::Emitter out;
    out.SetIndent(2);
    out.SetSeqFormat(YAML::Block);
    emit(out, doc);
    CADRE_CHECK(out.good(), "writing YAML: ", out.GetLastError());
    text += "---\n" + std::string(out.c_str()) + "\n";
  }
  return text;
}

}  // namespace cadre::deploy
