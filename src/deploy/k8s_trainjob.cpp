// TrainingRuntime + TrainJob. The runtime holds what stays the same between runs (volumes,
// /dev/shm, ports, grace period); the TrainJob holds the image, command, node count and
// resources, which the Trainer's torch plugin copies into the "node" container.
#include "deploy/k8s_trainjob.h"

#include "deploy/k8s_worker.h"

namespace cadre::deploy {

std::vector<Manifest> trainjob_manifests(const DeploySpec& s) {
  std::string runtime_name = s.name + "-runtime";
  // Trainer v2's torch plugin finds the trainer's pods by this label and its container by the name "node".
  Manifest job_template = {
      {"metadata", {{"labels", {{"trainer.kubeflow.org/trainjob-ancestor-step", "trainer"}}}}},
      {"spec",
       {{"backoffLimit", s.max_restarts},
        {"template", worker_pod_template(s, worker_container(s, "node", false, false), "Never")}}}};
  Manifest runtime = {
      {"apiVersion", "trainer.kubeflow.org/v1alpha1"},
      {"kind", "TrainingRuntime"},
      {"metadata",
       {{"name", runtime_name},
        {"namespace", s.ns},
        {"labels", {{"trainer.kubeflow.org/framework", "torch"}, {"app.kubernetes.io/instance", s.name}}}}},
      {"spec",
       {{"mlPolicy", {{"numNodes", s.max_nodes}, {"torch", Manifest::object()}}},
        {"template",
         {{"spec",
           {{"failurePolicy", {{"maxRestarts", s.max_restarts}}},
            {"replicatedJobs", Manifest::array({{{"name", "node"}, {"replicas", 1}, {"template", job_template}}})}}}}}}}};

  Manifest trainer = {{"image", s.image},
                      {"command", worker_command(s)},
                      // MAX pods; `cadre run --nnodes MIN:MAX` keeps training while some are missing.
                      {"numNodes", s.max_nodes},
                      {"numProcPerNode", s.nproc_per_node}};
  Manifest resources = worker_resources(s);
  if (!resources.empty()) trainer["resourcesPerNode"] = resources;
  Manifest trainjob = {
      {"apiVersion", "trainer.kubeflow.org/v1alpha1"},
      {"kind", "TrainJob"},
      {"metadata", {{"name", s.name}, {"namespace", s.ns}, {"labels", job_labels(s, "worker")}}},
      {"spec",
       {{"runtimeRef", {{"apiGroup", "trainer.kubeflow.org"}, {"kind", "TrainingRuntime"}, {"name", runtime_name}}},
        {"trainer", trainer}}}};
  return {runtime, trainjob};
}

}  // namespace cadre::deploy
