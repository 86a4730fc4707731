// The legacy Kubeflow training-operator API (kubeflow.org/v1 PyTorchJob) with an elasticPolicy
// whose rendezvous settings match what the workers' `cadre run` is given.
#pragma once

#include "deploy/job_spec.h"
#include "deploy/yaml_writer.h"

namespace cadre::deploy {

Manifest pytorchjob_manifest(const DeploySpec& spec);

}  // namespace cadre::deploy
