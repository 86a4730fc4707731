// PyTorchJob with elasticPolicy. The operator turns the policy into PET_* variables for
// torchrun; `cadre run` is given the same values as flags, and the schema test checks they agree.
#include "deploy/k8s_pytorchjob.h"

#include "deploy/k8s_etcd.h"
#include "deploy/k8s_worker.h"

namespace cadre::deploy {

Manifest pytorchjob_manifest(const DeploySpec& s) {
  Manifest elastic = {{"minReplicas", s.min_nodes},
                      {"maxReplicas", s.max_nodes},
                      {"maxRestarts", s.max_restarts},
                      {"rdzvBackend", "etcd"},
                      {"rdzvHost", etcd_client_host(s)},
                      {"rdzvPort", kEtcdClientPort},
                      {"rdzvId", s.rdzv_id}};
  // The training operator requires a container named "pytorch".
  Manifest worker = {{"replicas", s.max_nodes},
                     {"restartPolicy", "OnFailure"},
                     {"template", worker_pod_template(s, worker_container(s, "pytorch", true, true), "OnFailure")}};
  return {{"apiVersion", "kubeflow.org/v1"},
          {"kind", "PyTorchJob"},
          {"metadata", {{"name", s.name}, {"namespace", s.ns}, {"labels", job_labels(s, "worker")}}},
          {"spec",
           {{"elasticPolicy", elastic},
            {"nprocPerNode", std::to_string(s.nproc_per_node)},
            {"runPolicy", {{"cleanPodPolicy", "None"}, {"backoffLimit", s.max_restarts}}},
            {"pytorchReplicaSpecs", {{"Worker", worker}}}}}};
}

}  // namespace cadre::deploy
