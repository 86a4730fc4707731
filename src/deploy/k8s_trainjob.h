// Kubeflow Trainer v2 (trainer.kubeflow.org/v1alpha1): a TrainingRuntime holding the pod
// template (a JobSet with one replicated job "node") and the TrainJob that uses it. Trainer v2
// has no elastic policy; elasticity comes from `cadre run --nnodes MIN:MAX` over etcd.
#pragma once

#include <vector>

#include "deploy/job_spec.h"
#include "deploy/yaml_writer.h"

namespace cadre::deploy {

std::vector<Manifest> trainjob_manifests(const DeploySpec& spec);  // TrainingRuntime, TrainJob

}  // namespace cadre::deploy
