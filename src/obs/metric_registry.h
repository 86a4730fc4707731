// Metric samples in memory and their Prometheus text exposition (format 0.0.4): families of
// gauges and counters from the catalog, each with labelled samples, written in catalog order
// through obs/prometheus_text.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "obs/metric_catalog.h"
#include "obs/prometheus_text.h"

namespace cadre::obs {

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

}  // namespace cadre::obs
