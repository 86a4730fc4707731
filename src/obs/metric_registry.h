// Metric samples in memory and their Prometheus text exposition (format 0.0.4): families of
// gauges and counters from the catalog, each with labelled samples, written in catalog order.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "obs/metric_catalog.h"

namespace cadre::obs {

using Labels = std::vector<std::pair<std::string, std::string>>;

class MetricRegistry {
 public:
  // Sets the sample of `name` (a catalog name) with these labels, replacing an earlier value.
  void set(const std::string& name, const Labels& labels, double value);
  // Families and samples as Prometheus text: # HELP, # TYPE, then `name{labels} value` lines.
  std::string exposition() const;
  bool empty() const { return samples_.empty(); }

 private:
  // name -> (rendered label set -> value); the label text is the sample's identity.
  std::map<std::string, std::map<std::string, double>> samples_;
};

// `{a="1",b="x\"y"}` with Prometheus escaping (backslash, double quote, newline); "" when empty.
std::string labels_text(const Labels& labels);
// A sample value as Prometheus writes it: integers without exponent, NaN, +Inf, -Inf.
std::string sample_value_text(double value);

}  // namespace cadre::obs
