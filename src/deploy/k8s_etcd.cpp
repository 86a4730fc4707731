// etcd StatefulSet and Services. Members find each other through the headless Service, which
// publishes not-ready addresses: a member is not ready until it has peers to form a quorum with.
#include "deploy/k8s_etcd.h"

#include "deploy/k8s_worker.h"

namespace cadre::deploy {

std::string etcd_name(const DeploySpec& s) { return s.name + "-etcd"; }
std::string etcd_headless_name(const DeploySpec& s) { return s.name + "-etcd-peers"; }
std::string etcd_client_host(const DeploySpec& s) { return etcd_name(s) + "." + s.ns + ".svc"; }

static std::string member_host(const DeploySpec& s, const std::string& pod) {
  return pod + "." + etcd_headless_name(s) + "." + s.ns + ".svc";
}

std::vector<std::string> etcd_member_endpoints(const DeploySpec& s) {
  std::vector<std::string> out;
  for (int i = 0; i < kEtcdMembers; ++i)
    out.push_back(member_host(s, etcd_name(s) + "-" + std::to_string(i)) + ":" + std::to_string(kEtcdClientPort));
  return out;
}

std::vector<Manifest> etcd_manifests(const DeploySpec& s) {
  Manifest labels = job_labels(s, "etcd");
  Manifest ports = Manifest::array({{{"name", "client"}, {"port", kEtcdClientPort}, {"targetPort", "client"}},
                                    {{"name", "peer"}, {"port", kEtcdPeerPort}, {"targetPort", "peer"}}});
  Manifest headless = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", {{"name", etcd_headless_name(s)}, {"namespace", s.ns}, {"labels", labels}}},
      {"spec", {{"clusterIP", "None"}, {"publishNotReadyAddresses", true}, {"selector", labels}, {"ports", ports}}}};
  Manifest client = {
      {"apiVersion", "v1"},
      {"kind", "Service"},
      {"metadata", {{"name", etcd_name(s)}, {"namespace", s.ns}, {"labels", labels}}},
      {"spec",
       {{"type", "ClusterIP"},
        {"selector", labels},
        {"ports", Manifest::array({{{"name", "client"}, {"port", kEtcdClientPort}, {"targetPort", "client"}}})}}}};

  std::string cluster;
  for (int i = 0; i < kEtcdMembers; ++i) {
    std::string pod = etcd_name(s) + "-" + std::to_string(i);
    cluster += (i ? "," : "") + pod + "=http://" + member_host(s, pod) + ":" + std::to_string(kEtcdPeerPort);
  }
  std::string self = member_host(s, "$(POD_NAME)");
  Manifest container = {
      {"name", "etcd"},
      {"image", s.etcd_image},
      {"command", Manifest::array({"/usr/local/bin/etcd"})},
      {"args", Manifest::array({
                   "--name=$(POD_NAME)",
                   "--data-dir=/var/lib/etcd",
                   "--listen-client-urls=http://0.0.0.0:" + std::to_string(kEtcdClientPort),
                   "--advertise-client-urls=http://" + self + ":" + std::to_string(kEtcdClientPort),
                   "--listen-peer-urls=http://0.0.0.0:" + std::to_string(kEtcdPeerPort),
                   "--initial-advertise-peer-urls=http://" + self + ":" + std::to_string(kEtcdPeerPort),
                   "--initial-cluster=" + cluster,
                   "--initial-cluster-token=" + etcd_name(s),
                   "--initial-cluster-state=new",
               })},
      {"env", Manifest::array({{{"name", "POD_NAME"}, {"valueFrom", {{"fieldRef", {{"fieldPath", "metadata.name"}}}}}}})},
      {"ports", Manifest::array({{{"name", "client"}, {"containerPort", kEtcdClientPort}},
                                 {{"name", "peer"}, {"containerPort", kEtcdPeerPort}}})},
      {"readinessProbe",
       {{"httpGet", {{"path", "/health"}, {"port", "client"}}}, {"periodSeconds", 5}, {"failureThreshold", 3}}},
      {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "256Mi"}}}}},
      {"volumeMounts", Manifest::array({{{"name", "data"}, {"mountPath", "/var/lib/etcd"}}})},
  };
  Manifest statefulset = {
      {"apiVersion", "apps/v1"},
      {"kind", "StatefulSet"},
      {"metadata", {{"name", etcd_name(s)}, {"namespace", s.ns}, {"labels", labels}}},
      {"spec",
       {{"serviceName", etcd_headless_name(s)},
        {"replicas", kEtcdMembers},
        // All members start together: a new cluster forms only when a quorum is up.
        {"podManagementPolicy", "Parallel"},
        {"selector", {{"matchLabels", labels}}},
        {"template", {{"metadata", {{"labels", labels}}}, {"spec", {{"containers", Manifest::array({container})}}}}},
        {"volumeClaimTemplates",
         Manifest::array({{{"metadata", {{"name", "data"}}},
                           {"spec",
                            {{"accessModes", Manifest::array({"ReadWriteOnce"})},
                             {"resources", {{"requests", {{"storage", "1Gi"}}}}}}}}})}}}};
  return {headless, client, statefulset};
}

}  // namespace cadre::deploy
