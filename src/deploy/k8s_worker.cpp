// Worker container and pod template shared by the TrainJob and PyTorchJob writers.
#include "deploy/k8s_worker.h"

#include "core/config.h"
#include "deploy/k8s_etcd.h"

namespace cadre::deploy {

std::vector<std::string> worker_command(const DeploySpec& s) {
  std::string endpoints;
  for (const auto& e : etcd_member_endpoints(s)) endpoints += (endpoints.empty() ? "" : ",") + e;
  std::string nnodes = s.min_nodes == s.max_nodes ? std::to_string(s.max_nodes)
                                                  : std::to_string(s.min_nodes) + ":" + std::to_string(s.max_nodes);
  return {"cadre", "run",
          "--nnodes", nnodes,
          "--nproc-per-node", std::to_string(s.nproc_per_node),
          "--rdzv-backend", "etcd",
          "--rdzv-endpoint", endpoints,
          "--rdzv-id", s.rdzv_id,
          // The etcd members may still be starting when the first workers come up.
          "--rdzv-conf", "store_timeout=120",
          "--max-restarts", std::to_string(s.max_restarts),
          // SIGTERM (preemption, scale-down, deletion) reaches the workers, which checkpoint the
          // step they are in; the pod's grace period leaves the agent time after that.
          "--stop-timeout", std::to_string(s.stop_timeout_s),
          "--local-addr", "$(POD_IP)",
          // The agent's /metrics, on the pod's address, where the scrape annotations point.
          "--metrics-port", std::to_string(s.metrics_port),
          "--metrics-addr", "$(POD_IP)",
          "--log-dir", s.config.run.dir + "/logs/$(POD_NAME)",
          "--",
          "cadre", "train", "--config", std::string(kConfigMountPath) + "/" + kConfigFile, "--resume", "auto"};
}

Manifest job_labels(const DeploySpec& s, const std::string& component) {
  return {{"app.kubernetes.io/name", "cadre"},
          {"app.kubernetes.io/instance", s.name},
          {"app.kubernetes.io/component", component},
          {"app.kubernetes.io/managed-by", "cadre-deploy"}};
}

Manifest worker_resources(const DeploySpec& s) {
  Manifest amounts = Manifest::object();
  if (!s.cpu.empty()) amounts["cpu"] = s.cpu;
  if (!s.memory.empty()) amounts["memory"] = s.memory;
  if (s.gpus > 0) amounts["nvidia.com/gpu"] = std::to_string(s.gpus);
  if (s.efa > 0) amounts["vpc.amazonaws.com/efa"] = std::to_string(s.efa);
  if (amounts.empty()) return Manifest::object();
  // Requests equal limits: extended resources (GPUs, EFA) require it, and equal CPU and memory
  // give the pod Guaranteed QoS, so a training node is the last to be evicted.
  return {{"requests", amounts}, {"limits", amounts}};
}

Manifest worker_container(const DeploySpec& s, const std::string& name, bool with_command, bool with_resources) {
  Manifest c = {{"name", name}, {"image", s.image}};
  if (with_command) c["command"] = worker_command(s);
  c["workingDir"] = s.mount_path;
  c["env"] = Manifest::array({
      {{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}},
      {{"name", "POD_IP"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "status.podIP"}}}}}},
  });
  for (const auto& [key, value] : s.nccl_env) c["env"].push_back({{"name", key}, {"value", value}});
  c["ports"] = Manifest::array({{{"name", "metrics"}, {"containerPort", s.metrics_port}, {"protocol", "TCP"}}});
  if (with_resources) {
    Manifest r = worker_resources(s);
    if (!r.empty()) c["resources"] = r;
  }
  c["volumeMounts"] = Manifest::array({
      {{"name", "shared"}, {"mountPath", s.mount_path}},
      {{"name", "config"}, {"mountPath", kConfigMountPath}, {"readOnly", true}},
      {{"name", "shm"}, {"mountPath", "/dev/shm"}},
  });
  return c;
}

Manifest worker_pod_template(const DeploySpec& s, const Manifest& container, const std::string& restart_policy) {
  Manifest meta = {{"labels", job_labels(s, "worker")},
                   {"annotations",
                    {{"prometheus.io/scrape", "true"},
                     {"prometheus.io/port", std::to_string(s.metrics_port)},
                     {"prometheus.io/path", "/metrics"}}}};
  Manifest spec = {
      {"restartPolicy", restart_policy},
      {"terminationGracePeriodSeconds", s.grace_period_s},
      {"containers", Manifest::array({container})},
      {"volumes",
       Manifest::array({
           {{"name", "shared"}, {"persistentVolumeClaim", {{"claimName", s.volume_claim}}}},
           {{"name", "config"}, {"configMap", {{"name", s.name + "-config"}}}},
           {{"name", "shm"}, {"emptyDir", {{"medium", "Memory"}, {"sizeLimit", s.shm_size}}}},
       })},
  };
  return {{"metadata", meta}, {"spec", spec}};
}

Manifest config_map(const DeploySpec& s) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", s.name + "-config"}, {"namespace", s.ns}, {"labels", job_labels(s, "worker")}}},
          {"data", {{kConfigFile, config_to_yaml(s.config)}}}};
}

Manifest volume_claim(const DeploySpec& s) {
  Manifest spec = {{"accessModes", Manifest::array({"ReadWriteMany"})},
                   {"resources", {{"requests", {{"storage", s.volume_size}}}}}};
  if (!s.storage_class.empty()) spec["storageClassName"] = s.storage_class;
  return {{"apiVersion", "v1"},
          {"kind", "PersistentVolumeClaim"},
          {"metadata", {{"name", s.volume_claim}, {"namespace", s.ns}, {"labels", job_labels(s, "worker")}}},
          {"spec", spec}};
}

}  // namespace cadre::deploy
