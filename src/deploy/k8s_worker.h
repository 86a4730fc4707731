// The parts of a Kubernetes training job that TrainJob and PyTorchJob share: the worker
// container running `cadre run` with the etcd backend, its volumes (shared claim, config,
// /dev/shm), the pod's labels and scrape annotations, and the ConfigMap and claim it mounts.
#pragma once

#include <string>
#include <vector>

#include "deploy/job_spec.h"
#include "deploy/yaml_writer.h"

namespace cadre::deploy {

inline constexpr const char* kConfigMountPath = "/etc/cadre";
inline constexpr const char* kConfigFile = "config.yaml";

// `cadre run ... -- cadre train --config /etc/cadre/config.yaml --resume auto`.
std::vector<std::string> worker_command(const DeploySpec& spec);

// Labels every object of the job carries; `component` is worker or etcd.
Manifest job_labels(const DeploySpec& spec, const std::string& component);

// {requests, limits} for one node, or an empty object when nothing was asked for.
Manifest worker_resources(const DeploySpec& spec);

// The worker container: image, command, working directory, env, ports, mounts and (when
// `with_resources`) resources. Kubeflow names it: "node" for TrainJob, "pytorch" for PyTorchJob.
Manifest worker_container(const DeploySpec& spec, const std::string& name, bool with_command, bool with_resources);

// A pod template around the container: labels, Prometheus scrape annotations, volumes, grace period.
Manifest worker_pod_template(const DeploySpec& spec, const Manifest& container, const std::string& restart_policy);

Manifest config_map(const DeploySpec& spec);    // the resolved training config, mounted read-only
Manifest volume_claim(const DeploySpec& spec);  // ReadWriteMany claim for data, runs and checkpoints

}  // namespace cadre::deploy
