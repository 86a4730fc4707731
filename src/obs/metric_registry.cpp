// Text exposition of metric samples (see metric_registry.h).
#include "obs/metric_registry.h"

#include "core/error.h"

namespace cadre::obs {

void MetricRegistry::set(const std::string& name, const Labels& labels, double value) {
  metric_def(name);  // a name outside the catalog is a bug: fail loudly
  samples_[name][labels_text(labels)] = value;
}

std::string MetricRegistry::exposition() const {
  std::string out;
  for (const auto& def : metric_catalog()) {
    auto it = samples_.find(def.name);
    if (it == samples_.end()) continue;
    out += family_header(def.name, metric_type_name(def.type), def.help);
    for (const auto& [labels, value] : it->second) out += def.name + labels + " " + sample_value_text(value) + "\n";
  }
  return out;
}

}  // namespace cadre::obs
