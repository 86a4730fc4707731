// Every metric Cadre exports, in one list: name, type, help text, which labels it carries and
// when it appears. The agent's /metrics, the Grafana dashboard test and the Prometheus test
// all read this list, so a name cannot drift between what is served and what is documented.
#pragma once

#include <string>
#include <vector>

namespace cadre::obs {

enum class MetricType { Gauge, Counter };

// Which label set a metric carries (besides what Prometheus adds at scrape time).
enum class MetricScope {
  Rank,  // job, node, rank, local_rank: one sample per worker
  Node,  // job, node: one sample per agent
  Op,    // job, node, rank, local_rank, op: one sample per worker and collective kind
  Gpu,   // DCGM exporter's labels: gpu, UUID, device, modelName, Hostname
};

// When a metric has samples: always once a worker reported, or only after some event.
enum class MetricWhen { Always, AfterCheckpoint, AfterResume, AfterValidation, WithStragglers, OnGpu };

struct MetricDef {
  const char* name;
  MetricType type;
  MetricScope scope;
  MetricWhen when;
  const char* help;
};

// The catalog, in exposition order.
const std::vector<MetricDef>& metric_catalog();
// The definition with this name; throws cadre::Error when there is none (a typo in code).
const MetricDef& metric_def(const std::string& name);
const char* metric_type_name(MetricType type);  // "gauge" | "counter"

}  // namespace cadre::obs
