// `cadre deploy k8s|slurm --config job.yaml [flags]`: writes the Kubernetes manifests or the
// Slurm batch script for a training job. The job spec is the training config (with --set
// overrides) plus deploy options from its `deploy:` section, overridden by flags.
#include <cstdio>
#include <filesystem>

#include "cli/commands.h"
#include "cli/flags.h"
#include "core/config.h"
#include "core/error.h"
#include "core/file_util.h"
#include "deploy/job_spec.h"
#include "deploy/k8s_etcd.h"
#include "deploy/k8s_monitoring.h"
#include "deploy/k8s_pytorchjob.h"
#include "deploy/k8s_trainjob.h"
#include "deploy/k8s_worker.h"
#include "deploy/slurm_sbatch.h"

namespace cadre {
namespace fs = std::filesystem;
namespace {

const char* kUsage =
    "cadre deploy k8s|slurm --config <yaml> [--set key=value ...] [flags]\n"
    "  k8s:   TrainJob + TrainingRuntime (or --api pytorchjob), a 3-member etcd StatefulSet, the config as a\n"
    "         ConfigMap, a shared PersistentVolumeClaim, a Prometheus configuration (ConfigMap) and, for\n"
    "         train.device cuda, NVIDIA's dcgm-exporter (DaemonSet + Service); apply with `kubectl apply -f <out>/`\n"
    "  slurm: an sbatch script (srun one `cadre run` per node, checkpoint before the time limit, requeue,\n"
    "         --resume auto); submit with `sbatch <out>/<name>.sbatch`\n"
    "  Every flag below is also a key of the config's `deploy:` section (--nproc-per-node = deploy.nproc_per_node);\n"
    "  flags win.";

void write_file(const fs::path& path, const std::string& text) {
  file_write_atomic(path.string(), text);
  std::printf("wrote %s\n", path.c_str());
}

int deploy_k8s(const deploy::DeploySpec& s, const fs::path& out) {
  using namespace deploy;
  std::vector<Manifest> storage = {config_map(s)};
  if (s.write_claim) storage.push_back(volume_claim(s));
  write_file(out / "00-storage.yaml", yaml_write(storage));
  write_file(out / "10-etcd.yaml", yaml_write(etcd_manifests(s)));
  // One job file: a stale one of the other API would be applied too.
  std::string job_file = s.api == "trainjob" ? "20-trainjob.yaml" : "20-pytorchjob.yaml";
  std::string other = s.api == "trainjob" ? "20-pytorchjob.yaml" : "20-trainjob.yaml";
  fs::remove(out / other);
  write_file(out / job_file,
             s.api == "trainjob" ? yaml_write(trainjob_manifests(s)) : yaml_write({pytorchjob_manifest(s)}));
  for (const auto& [file, text] : monitoring_files(s)) {
    if (text.empty()) fs::remove(out / file);
    else write_file(out / file, text);
  }
  std::printf("job %s: %lld:%lld nodes x %lld workers, rendezvous id %s over etcd %s\n", s.name.c_str(),
              static_cast<long long>(s.min_nodes), static_cast<long long>(s.max_nodes),
              static_cast<long long>(s.nproc_per_node), s.rdzv_id.c_str(), etcd_client_host(s).c_str());
  std::printf("submit: kubectl apply -f %s/   (the data must be on claim %s under %s first)\n", out.c_str(),
              s.volume_claim.c_str(), s.mount_path.c_str());
  return 0;
}

int deploy_slurm(const deploy::DeploySpec& s, const fs::path& out) {
  fs::path config = out / "config.yaml", logs = out / "logs", script = out / (s.name + ".sbatch");
  fs::create_directories(logs);
  write_file(config, config_to_yaml(s.config));
  write_file(script, deploy::sbatch_script(s, config.string(), logs.string()));
  fs::permissions(script, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec, fs::perm_options::add);
  std::printf("submit: sbatch %s   (output in %s)\n", script.c_str(), logs.c_str());
  return 0;
}

}  // namespace

int cmd_deploy(const Args& args) {
  std::string which = args.empty() ? "" : args[0];
  if (which == "-h" || which == "--help") {
    std::printf("usage: %s\n", kUsage);
    return 0;
  }
  CADRE_CONFIG_CHECK(which == "k8s" || which == "slurm", "expected `deploy k8s` or `deploy slurm`, got '", which,
                     "'\nusage: ", kUsage);
  auto target = which == "k8s" ? deploy::Target::kubernetes : deploy::Target::slurm;

  std::string config_path, out;
  std::vector<std::string> overrides;
  Flags flags(std::string("cadre deploy ") + which + " --config <yaml> [--set key=value ...] [--out DIR] [flags]");
  flags.add("--config", &config_path, "training config (the file `cadre train` reads)");
  flags.add("--set", &overrides, "override a config key, e.g. --set train.steps=100 (repeatable)");
  flags.add("--out", &out, "directory to write into (default deploy/<name>)");
  std::map<std::string, std::string> values;  // flag targets, one per option
  for (const auto& o : deploy::deploy_options()) values[o.key];
  for (const auto& o : deploy::deploy_options()) {
    bool applies = target == deploy::Target::kubernetes ? o.kubernetes : o.slurm;
    std::string help = o.help;
    if (*o.default_value) help += std::string(" (default ") + o.default_value + ")";
    if (applies) flags.add(deploy::deploy_flag_name(o), &values[o.key], help);
  }
  auto rest = flags.parse(Args(args.begin() + 1, args.end()));
  CADRE_CONFIG_CHECK(rest.empty(), "unexpected argument '", rest.empty() ? "" : rest[0], "'\n", flags.usage());
  CADRE_CONFIG_CHECK(!config_path.empty(), "--config is required\n", flags.usage());

  std::map<std::string, std::string> given;
  for (const auto& o : deploy::deploy_options())
    if (flags.given(deploy::deploy_flag_name(o))) given[o.key] = values[o.key];
  Config config = config_load(config_path, overrides);
  deploy::DeploySpec spec = deploy::deploy_spec_resolve(config, given, target);

  fs::path dir = fs::absolute(out.empty() ? fs::path("deploy") / spec.name : fs::path(out)).lexically_normal();
  std::error_code ec;
  fs::create_directories(dir, ec);
  CADRE_CONFIG_CHECK(!ec, "--out ", dir.string(), ": cannot create the directory: ", ec.message());
  return target == deploy::Target::kubernetes ? deploy_k8s(spec, dir) : deploy_slurm(spec, dir);
}

}  // namespace cadre
