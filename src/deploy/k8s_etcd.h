// The job's own etcd for rendezvous: a 3-member StatefulSet, its headless Service (stable
// member names, peer traffic) and a client Service, and the endpoints workers are given.
#pragma once

#include <string>
#include <vector>

#include "deploy/job_spec.h"
#include "deploy/yaml_writer.h"

namespace cadre::deploy {

inline constexpr int kEtcdMembers = 3;
inline constexpr int kEtcdClientPort = 2379;
inline constexpr int kEtcdPeerPort = 2380;

std::string etcd_name(const DeploySpec& spec);              // <name>-etcd: StatefulSet and client Service
std::string etcd_headless_name(const DeploySpec& spec);     // <name>-etcd-peers
std::string etcd_client_host(const DeploySpec& spec);       // <name>-etcd.<ns>.svc
std::vector<std::string> etcd_member_endpoints(const DeploySpec& spec);  // <name>-etcd-<i>.<name>-etcd-peers.<ns>.svc:2379

// Headless Service, client Service, StatefulSet.
std::vector<Manifest> etcd_manifests(const DeploySpec& spec);

}  // namespace cadre::deploy
