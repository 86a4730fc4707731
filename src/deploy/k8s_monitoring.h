// Monitoring written next to a Kubernetes job: a Prometheus configuration (as a ConfigMap) that
// scrapes the job's agents and, for a CUDA job, NVIDIA's dcgm-exporter as a DaemonSet on the GPU
// nodes with a Service that configuration scrapes too.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "deploy/job_spec.h"
#include "deploy/yaml_writer.h"

namespace cadre::deploy {

inline constexpr int kDcgmExporterPort = 9400;  // dcgm-exporter's own default
inline constexpr const char* kPrometheusConfigFile = "prometheus.yml";

// True when the job trains on CUDA devices (train.device: cuda): only then is DCGM written.
bool wants_dcgm_exporter(const DeploySpec& spec);

std::string dcgm_exporter_name(const DeploySpec& spec);  // <name>-dcgm-exporter: DaemonSet and Service

// DaemonSet + Service of dcgm-exporter (CUDA jobs only).
std::vector<Manifest> dcgm_exporter_manifests(const DeploySpec& spec);

// The prometheus.yml text: a job `cadre` for the agents' /metrics and, for a CUDA job, a job
// `dcgm-exporter` for the exporter's Service, both found through Kubernetes service discovery.
std::string prometheus_config(const DeploySpec& spec);

// That text in a ConfigMap <name>-prometheus under the key prometheus.yml.
Manifest prometheus_config_map(const DeploySpec& spec);

// The monitoring files of the output directory as {file name, text}; an empty text names a file
// a CUDA deploy wrote that this one must remove (a stale DaemonSet would be applied too).
std::vector<std::pair<std::string, std::string>> monitoring_files(const DeploySpec& spec);

}  // namespace cadre::deploy
