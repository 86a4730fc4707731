// Kubernetes manifests are built as ordered JSON trees (keys keep the order they were written in,
// strings stay strings) and written as YAML documents.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace cadre::deploy {

using Manifest = nlohmann::ordered_json;

// One or more documents, separated by `---`. Strings that a YAML 1.1 reader (Kubernetes' own)
// would take for a number, a boolean or null are quoted; multi-line strings become literal blocks.
std::string yaml_write(const std::vector<Manifest>& documents);

}  // namespace cadre::deploy
