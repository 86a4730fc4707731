// Prometheus text format reader (see exposition_parse.h).
#include "obs/exposition_parse.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "core/error.h"

namespace cadre::obs {

std::string ParsedSample::label(const std::string& key) const {
  auto it = labels.find(key);
  return it == labels.end() ? "" : it->second;
}

namespace {

bool name_char(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (!first && c >= '0' && c <= '9');
}

double parse_value(const std::string& text, bool* ok) {
  if (text == "NaN") return std::nan("");
  if (text == "+Inf" || text == "Inf") return HUGE_VAL;
  if (text == "-Inf") return -HUGE_VAL;
  char* end = nullptr;
  double v = std::strtod(text.c_str(), &end);
  *ok = !text.empty() && end && *end == 0;
  return v;
}

}  // namespace

std::vector<ParsedSample> exposition_parse(const std::string& text) {
  std::vector<ParsedSample> out;
  std::istringstream in(text);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    auto bad = [&](const char* why) { return Error(str("metrics line ", number, ": ", why, ": '", line, "'")); };
    ParsedSample s;
    size_t i = 0;
    while (i < line.size() && name_char(line[i], i == 0)) ++i;
    if (i == 0) throw bad("expected a metric name");
    s.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t k = i;
        while (i < line.size() && name_char(line[i], i == k)) ++i;
        std::string key = line.substr(k, i - k);
        if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') throw bad("bad label");
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            char e = line[++i];
            value += e == 'n' ? '\n' : e;
          } else {
            value += line[i];
          }
          ++i;
        }
        if (i >= line.size()) throw bad("unterminated label value");
        ++i;  // closing quote
        s.labels[key] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) throw bad("unterminated label set");
      ++i;  // '}'
    }
    while (i < line.size() && line[i] == ' ') ++i;
    size_t end = line.find(' ', i);
    bool ok = true;
    s.value = parse_value(line.substr(i, end == std::string::npos ? std::string::npos : end - i), &ok);
    if (!ok) throw bad("bad sample value");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace cadre::obs
