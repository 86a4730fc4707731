// Prometheus text exposition (see prometheus_text.h).
#include "obs/prometheus_text.h"

#include <cmath>
#include <cstdio>

namespace cadre::obs {

std::string labels_text(const Labels& labels) {
  if (labels.empty()) return "";
  std::string out = "{";
  for (size_t i = 0; i < labels.size(); ++i) {
    if (i) out += ",";
    out += labels[i].first + "=\"";
    for (char ch : labels[i].second) {
      if (ch == '\\') out += "\\\\";
      else if (ch == '"') out += "\\\"";
      else if (ch == '\n') out += "\\n";
      else out += ch;
    }
    out += "\"";
  }
  return out + "}";
}

std::string sample_value_text(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buf[40];
  if (value == std::floor(value) && std::fabs(value) < 1e15)
    std::snprintf(buf, sizeof buf, "%.0f", value);
  else
    std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

std::string family_header(const std::string& name, const std::string& type, const std::string& help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::string sample_line(const std::string& name, const Labels& labels, double value) {
  return name + labels_text(labels) + " " + sample_value_text(value) + "\n";
}

std::string histogram_lines(const std::string& name, const std::vector<double>& bounds,
                            const std::vector<uint64_t>& counts, double sum) {
  std::string out;
  uint64_t cumulative = 0;
  for (size_t i = 0; i < bounds.size(); ++i) {
    cumulative += counts[i];
    out += sample_line(name + "_bucket", {{"le", sample_value_text(bounds[i])}}, static_cast<double>(cumulative));
  }
  cumulative += counts[bounds.size()];
  out += sample_line(name + "_bucket", {{"le", "+Inf"}}, static_cast<double>(cumulative));
  out += sample_line(name + "_sum", {}, sum);
  out += sample_line(name + "_count", {}, static_cast<double>(cumulative));
  return out;
}

}  // namespace cadre::obs
