// Text exposition of metric samples (see metric_registry.h).
#include "obs/metric_registry.h"

#include <cmath>
#include <cstdio>

#include "core/error.h"

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

void MetricRegistry::set(const std::string& name, const Labels& labels, double value) {
  metric_def(name);  // a name outside the catalog is a bug: fail loudly
  samples_[name][labels_text(labels)] = value;
}

std::string MetricRegistry::exposition() const {
  std::string out;
  for (const auto& def : metric_catalog()) {
    auto it = samples_.find(def.name);
    if (it == samples_.end()) continue;
    out += str("# HELP ", def.name, " ", def.help, "\n# TYPE ", def.name, " ", metric_type_name(def.type), "\n");
    for (const auto& [labels, value] : it->second) out += str(def.name, labels, " ", sample_value_text(value), "\n");
  }
  return out;
}

}  // namespace cadre::obs
