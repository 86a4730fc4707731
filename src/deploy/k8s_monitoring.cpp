// dcgm-exporter DaemonSet and Service, and the Prometheus configuration scraping the job's agents
// and that exporter. Both scrape jobs find their targets through Kubernetes service discovery in
// the job's namespace and keep only this job's objects, matched on the labels written here.
#include "deploy/k8s_monitoring.h"

#include <cctype>

#include "deploy/k8s_worker.h"

namespace cadre::deploy {
namespace {

// Prometheus' name for a pod or service label: every character outside [A-Za-z0-9_] becomes '_'.
std::string meta_label(const std::string& role, const std::string& label) {
  std::string out = "__meta_kubernetes_" + role + "_label_";
  for (char c : label) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

Manifest keep(const std::vector<std::string>& source_labels, const std::string& regex) {
  return {{"source_labels", source_labels}, {"regex", regex}, {"action", "keep"}};
}

Manifest copy_label(const std::string& source, const std::string& target) {
  return {{"source_labels", Manifest::array({source})}, {"target_label", target}};
}

Manifest namespace_discovery(const DeploySpec& s, const std::string& role) {
  return Manifest::array({{{"role", role}, {"namespaces", {{"names", Manifest::array({s.ns})}}}}});
}

// The agents: one target per worker pod, at its container port named "metrics".
// honor_labels keeps the agents' `job` label (the rendezvous id) on Cadre's series.
Manifest cadre_scrape_job(const DeploySpec& s) {
  const std::string instance = "app.kubernetes.io/instance", component = "app.kubernetes.io/component";
  return {{"job_name", "cadre"},
          {"honor_labels", true},
          {"kubernetes_sd_configs", namespace_discovery(s, "pod")},
          {"relabel_configs",
           Manifest::array({
               keep({meta_label("pod", instance), meta_label("pod", component)}, s.name + ";worker"),
               keep({"__meta_kubernetes_pod_container_port_name"}, "metrics"),
               // Finished pods of earlier attempts keep their labels and addresses.
               {{"source_labels", Manifest::array({"__meta_kubernetes_pod_phase"})},
                {"regex", "Succeeded|Failed"},
                {"action", "drop"}},
               copy_label("__meta_kubernetes_pod_name", "pod"),
               copy_label("__meta_kubernetes_pod_node_name", "kubernetes_node"),
           })}};
}

// The exporter through its Service's endpoints. Its series keep their own `pod`, `namespace` and
// `container` labels (the pod a GPU is assigned to), so no target label of those names is added.
Manifest dcgm_scrape_job(const DeploySpec& s) {
  return {{"job_name", "dcgm-exporter"},
          {"kubernetes_sd_configs", namespace_discovery(s, "endpointslice")},
          {"relabel_configs",
           Manifest::array({
               keep({"__meta_kubernetes_service_name", "__meta_kubernetes_endpointslice_port_name"},
                    dcgm_exporter_name(s) + ";metrics"),
               copy_label("__meta_kubernetes_pod_node_name", "kubernetes_node"),
           })}};
}

Manifest dcgm_container(const DeploySpec& s) {
  return {{"name", "dcgm-exporter"},
          {"image", s.dcgm_exporter_image},
          {"env",
           Manifest::array({
               {{"name", "DCGM_EXPORTER_LISTEN"}, {"value", ":" + std::to_string(kDcgmExporterPort)}},
               // Labels each GPU's series with the pod, namespace and container it is assigned to
               // (read from the kubelet's pod-resources socket mounted below).
               {{"name", "DCGM_EXPORTER_KUBERNETES"}, {"value", "true"}},
               {{"name", "NODE_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "spec.nodeName"}}}}}},
           })},
          {"ports", Manifest::array({{{"name", "metrics"}, {"containerPort", kDcgmExporterPort}, {"protocol", "TCP"}}})},
          {"readinessProbe",
           {{"httpGet", {{"path", "/health"}, {"port", "metrics"}}}, {"initialDelaySeconds", 5}, {"periodSeconds", 10}}},
          // Root with SYS_ADMIN only: DCGM's profiling fields (DCGM_FI_PROF_*) need it.
          {"securityContext",
           {{"runAsNonRoot", false},
            {"runAsUser", 0},
            {"allowPrivilegeEscalation", false},
            {"capabilities", {{"add", Manifest::array({"SYS_ADMIN"})}, {"drop", Manifest::array({"ALL"})}}}}},
          // No nvidia.com/gpu request: the exporter watches every GPU of its node and must not
          // take one from the workers.
          {"resources",
           {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}, {"limits", {{"cpu", "200m"}, {"memory", "256Mi"}}}}},
          {"volumeMounts",
           Manifest::array({{{"name", "pod-resources"}, {"mountPath", "/var/lib/kubelet/pod-resources"},
                             {"readOnly", true}}})}};
}

}  // namespace

bool wants_dcgm_exporter(const DeploySpec& s) { return s.config.train.device == "cuda"; }

std::string dcgm_exporter_name(const DeploySpec& s) { return s.name + "-dcgm-exporter"; }

std::vector<Manifest> dcgm_exporter_manifests(const DeploySpec& s) {
  Manifest labels = job_labels(s, "dcgm-exporter");
  Manifest pod_spec = {
      // The label NVIDIA's GPU Feature Discovery (GPU Operator, device plugin chart) puts on GPU nodes.
      {"nodeSelector", {{"nvidia.com/gpu.present", "true"}}},
      // GPU nodes are commonly tainted so that only pods asking for GPUs land there.
      {"tolerations",
       Manifest::array({{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}})},
      {"automountServiceAccountToken", false},
      {"containers", Manifest::array({dcgm_container(s)})},
      {"volumes",
       Manifest::array({{{"name", "pod-resources"},
                         {"hostPath", {{"path", "/var/lib/kubelet/pod-resources"}, {"type", "Directory"}}}}})},
  };
  Manifest daemonset = {
      {"apiVersion", "apps/v1"},
      {"kind", "DaemonSet"},
      {"metadata", {{"name", dcgm_exporter_name(s)}, {"namespace", s.ns}, {"labels", labels}}},
      {"spec",
       {{"selector", {{"matchLabels", labels}}},
        {"updateStrategy", {{"type", "RollingUpdate"}}},
        {"template", {{"metadata", {{"labels", labels}}}, {"spec", pod_spec}}}}}};
  Manifest service = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", {{"name", dcgm_exporter_name(s)}, {"namespace", s.ns}, {"labels", labels}}},
      {"spec",
       {{"type", "ClusterIP"},
        {"selector", labels},
        {"ports", Manifest::array({{{"name", "metrics"}, {"port", kDcgmExporterPort}, {"targetPort", "metrics"},
                                    {"protocol", "TCP"}}})}}}};
  return {daemonset, service};
}

std::string prometheus_config(const DeploySpec& s) {
  Manifest jobs = Manifest::array({cadre_scrape_job(s)});
  if (wants_dcgm_exporter(s)) jobs.push_back(dcgm_scrape_job(s));
  Manifest config = {{"global", {{"scrape_interval", "10s"}}}, {"scrape_configs", jobs}};
  std::string header =
      "# Prometheus configuration for Cadre job " + s.name + " in namespace " + s.ns +
      ", written by `cadre deploy k8s`.\n"
      "# Job `cadre`: the agents' /metrics (Cadre's series keep their own job label, the rendezvous id;\n"
      "# Cadre's per-rank GPU series get job=\"cadre\").\n";
  if (wants_dcgm_exporter(s))
    header += "# Job `dcgm-exporter`: every GPU of the GPU nodes, job=\"dcgm-exporter\" (" + dcgm_exporter_name(s) +
              ").\n# Same DCGM_FI_* names in both: select one job in a query, never sum across them.\n";
  std::string text = yaml_write({config});
  return header + text.substr(text.find('\n') + 1);  // without yaml_write's "---" line
}

Manifest prometheus_config_map(const DeploySpec& s) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", s.name + "-prometheus"}, {"namespace", s.ns}, {"labels", job_labels(s, "monitoring")}}},
          {"data", {{kPrometheusConfigFile, prometheus_config(s)}}}};
}

std::vector<std::pair<std::string, std::string>> monitoring_files(const DeploySpec& s) {
  return {{"30-dcgm-exporter.yaml", wants_dcgm_exporter(s) ? yaml_write(dcgm_exporter_manifests(s)) : ""},
          {"40-prometheus.yaml", yaml_write({prometheus_config_map(s)})}};
}

}  // namespace cadre::deploy
