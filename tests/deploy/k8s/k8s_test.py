# `cadre deploy k8s` output against the real schemas and the semantics a schema cannot see.
# Schemas, as an API server would check the objects on create: core kinds with kubernetes-validate
# (Kubernetes' own OpenAPI types, strict: unknown fields are refused), Kubeflow's kinds with
# jsonschema against the openAPIV3Schema of their CRDs (crds/, see its README). CRD schemas are
# structural: unknown fields are refused (what kubectl's strict field validation does), and
# int-or-string, list-map keys and the CEL rules that apply on create are checked; CEL transition
# rules (those naming oldSelf) only apply to updates and are skipped.
# Semantics: the etcd endpoints workers get resolve to the Services written, the rendezvous id is
# shared by a job and unique per deployment, the config's paths lie on the mounted volume, the
# rendezvous settings of the PyTorchJob's elasticPolicy agree with the workers' flags.
# Monitoring: the Prometheus configuration written (a ConfigMap) passes `promtool check config`
# (Debian's prometheus package) and its scrape jobs, relabelled as Prometheus relabels the
# discovered pods and endpoints, keep the job's workers and, for a CUDA job, the dcgm-exporter
# DaemonSet's pods behind its Service; a CPU job gets nothing of DCGM.
# Also: bad input exits 2 naming the field. Run by ctest (DeployK8sSchemas) with CADRE_BIN and
# CADRE_SOURCE_DIR set, under the project venv (python/requirements.txt, scripts/setup.sh).
import copy
import datetime
import json
import os
import posixpath
import re
import shutil
import subprocess
import tempfile
from urllib.parse import urlsplit

import jsonschema
import kubernetes_validate
import pytest
import yaml

CADRE = os.environ.get("CADRE_BIN")
SOURCE = os.environ.get("CADRE_SOURCE_DIR")
if not (CADRE and SOURCE):
    raise RuntimeError("CADRE_BIN and CADRE_SOURCE_DIR must be set (ctest sets them)")
TINY_CONFIG = os.path.join(SOURCE, "configs/tiny.yaml")
HERE = os.path.dirname(os.path.abspath(__file__))
K8S_VERSION = "1.37"  # the newest Kubernetes whose types kubernetes-validate 1.37.0 carries

# ---------------------------------------------------------------------------------------------
# Reading manifests


class ManifestLoader(yaml.SafeLoader):
    """Kubernetes reads manifests as YAML 1.1 (sigs.k8s.io/yaml, as PyYAML does): "yes", "on",
    0755 are not strings there. Timestamp-like scalars stay strings, as go-yaml v2 leaves them
    when decoding into interface{}; a bare "=" is a string too."""


ManifestLoader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
ManifestLoader.add_constructor("tag:yaml.org,2002:value", lambda loader, node: loader.construct_scalar(node))


def read_manifests(file):
    with open(file, encoding="utf-8") as f:
        text = f.read()
    try:
        return [d for d in yaml.load_all(text, Loader=ManifestLoader) if d is not None]
    except yaml.YAMLError as e:
        raise AssertionError(f"{file}: {e}") from e


# ---------------------------------------------------------------------------------------------
# Kubeflow CRD schemas

# The CEL rules of the CRDs that apply on create, in Python. A rule not listed here that meets a
# written object fails the test: new Kubeflow rules are never ignored silently.
DNS_1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
CEL_RULES = {
    "self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')":
        lambda s: DNS_1035.fullmatch(s["metadata"]["name"]) is not None,
    "size(self.metadata.name) <= 63": lambda s: len(s["metadata"]["name"]) <= 63,
    "self == '' || self.matches('^[A-Za-z][A-Za-z0-9+.-]*://.+$')":
        lambda s: s == "" or re.search(r"^[A-Za-z][A-Za-z0-9+.-]*://.+$", s) is not None,
    "self in ['trainer.kubeflow.org/trainjob-controller', 'kueue.x-k8s.io/multikueue']":
        lambda s: s in ("trainer.kubeflow.org/trainjob-controller", "kueue.x-k8s.io/multikueue"),
    "has(self.lastUpdatedTime)": lambda s: "lastUpdatedTime" in s,
    "[has(self.torch), has(self.mpi), has(self.jax), has(self.xgboost),has(self.flux)].filter(x, x).size() <= 1":
        lambda s: sum(k in s for k in ("torch", "mpi", "jax", "xgboost", "flux")) <= 1,
    "self >= 1": lambda s: s >= 1,
    "!self.exists(c, c == 'node')": lambda s: "node" not in s,
    "!(has(self.startupPolicy) && self.startupPolicy.startupPolicyOrder == 'InOrder' && self.replicatedJobs.exists(x, has(x.dependsOn)))":
        lambda s: not ("startupPolicy" in s and s["startupPolicy"].get("startupPolicyOrder") == "InOrder"
                       and any("dependsOn" in x for x in s.get("replicatedJobs") or [])),
    "self.templates.all(t, !has(t.metadata.namespace) || size(t.metadata.namespace) == 0)":
        lambda s: all(not (t.get("metadata") or {}).get("namespace") for t in s["templates"]),
}


def _list_type(validator, kind, instance, schema):
    """x-kubernetes-list-type: set items are unique, map items unique by their list-map keys
    (a missing key counts as its default, as the API server defaults it first)."""
    if kind == "atomic" or not validator.is_type(instance, "array"):
        return
    keys = schema.get("x-kubernetes-list-map-keys") if kind == "map" else None
    props = (schema.get("items") or {}).get("properties") or {}
    seen = set()
    for item in instance:
        if keys and not isinstance(item, dict):
            continue  # the item's type is reported by the type check
        ident = [item.get(k, (props.get(k) or {}).get("default")) for k in keys] if keys else item
        key = json.dumps(ident, sort_keys=True)
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate {kind} entry {key}")
        seen.add(key)


def _cel(validator, rules, instance, schema):
    for r in rules:
        rule, message = r["rule"], r.get("message")
        if "oldSelf" in rule:
            continue  # transition rule: updates only
        check = CEL_RULES.get(rule)
        if check is None:
            yield jsonschema.ValidationError(f"CEL rule not evaluated by this test: {rule}")
            return
        try:
            ok = check(instance)
        except (TypeError, KeyError, AttributeError) as e:
            yield jsonschema.ValidationError(f"CEL rule {rule!r} cannot be evaluated here ({e!r})")
            return
        if not ok:
            yield jsonschema.ValidationError(message or rule)
            return


def _int_format(bits):
    def check(n):
        if isinstance(n, bool) or not isinstance(n, (int, float)):
            return True  # formats only constrain numbers
        return float(n).is_integer() and (bits is None or -(2 ** (bits - 1)) <= n < 2 ** (bits - 1))
    return check


def _date_time(s):
    if not isinstance(s, str):
        return True
    try:
        datetime.datetime.fromisoformat(s.replace("Z", "+00:00"))
        return True
    except ValueError:
        return False


FORMATS = jsonschema.FormatChecker(formats=())
FORMATS.checks("int32")(_int_format(32))
FORMATS.checks("int64")(_int_format(64))
FORMATS.checks("date-time")(_date_time)

CrdValidator = jsonschema.validators.extend(
    jsonschema.Draft7Validator,
    validators={"x-kubernetes-list-type": _list_type, "x-kubernetes-validations": _cel},
)


def structural(s):
    """CRD schema -> JSON schema that jsonschema checks the way the API server does."""
    if isinstance(s, list):
        return [structural(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {k: v if k in ("enum", "default", "example") else structural(v) for k, v in s.items()}
    if out.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["anyOf"] = [{"type": "integer"}, {"type": "string"}]
    if out.get("nullable") and isinstance(out.get("type"), str):
        out["type"] = [out["type"], "null"]
    out.pop("nullable", None)
    if (out.get("type") == "object" and isinstance(out.get("properties"), dict)
            and "additionalProperties" not in out and not out.get("x-kubernetes-preserve-unknown-fields")):
        out["additionalProperties"] = False
    return out


def compile_schema(schema):
    return CrdValidator(structural(schema), format_checker=FORMATS)


CRD_VALIDATORS = {}  # "group/version/Kind" -> validator


def load_crd(file):
    with open(os.path.join(HERE, "crds", file), encoding="utf-8") as f:
        crd = yaml.safe_load(f)
    for v in crd["spec"]["versions"]:
        key = f"{crd['spec']['group']}/{v['name']}/{crd['spec']['names']['kind']}"
        CRD_VALIDATORS[key] = compile_schema(v["schema"]["openAPIV3Schema"])
    return crd


def pod_template_validator(training_runtime_crd):
    """The JSON schema of a pod template as Kubeflow's CRDs embed it (full Kubernetes
    PodTemplateSpec, structural), for checking templates of core kinds strictly as well."""
    schema = training_runtime_crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    rj = schema["properties"]["spec"]["properties"]["template"]["properties"]["spec"]["properties"]["replicatedJobs"]["items"]
    return compile_schema(rj["properties"]["template"]["properties"]["spec"]["properties"]["template"])


def _where(path):
    return "/" + "/".join(str(p) for p in path)


def schema_errors(validator, obj):
    return [f"{_where(e.absolute_path)}: {e.message}" for e in validator.iter_errors(obj)]


def _core_errors(obj):
    # kubernetes-validate reports the first problem it meets.
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
        return []
    except kubernetes_validate.ValidationError as e:
        return [f"{_where(e.path)}: {e.message}"]


def validate(obj):
    """The problems found in one object (empty when valid)."""
    api_kind = f"{obj.get('apiVersion')}/{obj.get('kind')}"
    crd = CRD_VALIDATORS.get(api_kind)
    if crd is None:
        try:
            return _core_errors(obj)
        except kubernetes_validate.SchemaNotFoundError:
            return [f"no schema for {api_kind}"]
    # A CRD's schema leaves metadata to the API server, which checks it as an ObjectMeta: check it
    # so, as the metadata of an otherwise empty ConfigMap.
    meta = _core_errors({"apiVersion": "v1", "kind": "ConfigMap", "metadata": obj.get("metadata")})
    return meta + schema_errors(crd, obj)


RUNTIME_CRD = load_crd("trainer.kubeflow.org_trainingruntimes.yaml")
load_crd("trainer.kubeflow.org_trainjobs.yaml")
load_crd("kubeflow.org_pytorchjobs.yaml")
POD_TEMPLATE = pod_template_validator(RUNTIME_CRD)

# ---------------------------------------------------------------------------------------------
# Running cadre and reading what it wrote


@pytest.fixture(scope="module")
def work():
    with tempfile.TemporaryDirectory(prefix="cadre-deploy-k8s-") as d:
        yield d


def deploy(args, target="k8s"):
    return subprocess.run([CADRE, "deploy", target, *args], capture_output=True, text=True, timeout=120)


class Deployment:
    def __init__(self, objects, output):
        self.objects = objects
        self.output = output
        self.by_kind = {}
        for o in objects:
            self.by_kind.setdefault(o["kind"], []).append(o)


def deployed(work, name, args):
    """Writes a deployment and returns its objects (by kind too)."""
    out = os.path.join(work, name)
    r = deploy(["--config", TINY_CONFIG, "--name", name, "--out", out, *args])
    assert r.returncode == 0, f"cadre deploy k8s exited {r.returncode}\n{r.stdout}{r.stderr}"
    objects = [o for f in sorted(os.listdir(out)) for o in read_manifests(os.path.join(out, f))]
    return Deployment(objects, r.stdout + r.stderr)


def flag(argv, name):
    """A flag's value in an argv list."""
    assert name in argv and argv.index(name) + 1 < len(argv), f"{name} missing in {' '.join(argv)}"
    return argv[argv.index(name) + 1]


def namespace(o):
    return o["metadata"].get("namespace") or "default"


def resolve(host, port, ns, objects):
    """Cluster DNS as kube-dns answers a pod in namespace `ns` (search path <ns>.svc, svc,
    cluster.local): a Service name, or <pod>.<headless service> for a StatefulSet member.
    Returns what the name reaches, or raises AssertionError saying why it does not resolve."""
    services = [o for o in objects if o["kind"] == "Service"]
    name = re.sub(r"\.cluster\.local$", "", host)
    parts = name.split(".")
    if parts[-1] == "svc":
        parts = parts[:-1]
    # [svc] [svc, ns] [pod, svc] [pod, svc, ns]
    candidates = []
    if len(parts) == 1:
        candidates.append({"svc": parts[0], "ns": ns})
    if len(parts) == 2:
        candidates += [{"svc": parts[0], "ns": parts[1]}, {"pod": parts[0], "svc": parts[1], "ns": ns}]
    if len(parts) == 3:
        candidates.append({"pod": parts[0], "svc": parts[1], "ns": parts[2]})
    for c in candidates:
        svc = next((s for s in services if s["metadata"]["name"] == c["svc"] and namespace(s) == c["ns"]), None)
        if svc is None:
            continue
        sp = next((p for p in svc["spec"]["ports"] if p["port"] == port), None)
        assert sp, f"{host}:{port}: Service {c['svc']} has no port {port}"
        selector = svc["spec"].get("selector") or {}
        backends = [o for o in objects if o["kind"] == "StatefulSet" and namespace(o) == c["ns"] and selector
                    and all((o["spec"]["template"]["metadata"].get("labels") or {}).get(k) == v
                            for k, v in selector.items())]
        assert backends, f"{host}: Service {c['svc']} selects no pods written here"
        for sts in backends:
            container = sts["spec"]["template"]["spec"]["containers"][0]
            target = sp.get("targetPort", sp["port"])
            assert any(p.get("containerPort") == target or p.get("name") == target for p in container.get("ports", [])), \
                f"{host}:{port}: target port {target} is not a port of {sts['metadata']['name']}'s container"
        if "pod" not in c:
            return {"service": svc, "statefulSet": backends[0], "pod": None}
        assert svc["spec"].get("clusterIP") == "None", \
            f"{host}: per-pod names need a headless Service, {c['svc']} is not"
        sts = next((s for s in backends if s["spec"].get("serviceName") == c["svc"]), None)
        assert sts, f"{host}: no StatefulSet with serviceName {c['svc']}"
        m = re.fullmatch(re.escape(sts["metadata"]["name"]) + r"-(\d+)", c["pod"])
        assert m and int(m[1]) < sts["spec"]["replicas"], f"{host}: {c['pod']} is not a member of {sts['metadata']['name']}"
        return {"service": svc, "statefulSet": sts, "pod": c["pod"]}
    raise AssertionError(f"{host}:{port} does not resolve to a Service written here")


def worker_pod(d):
    """The worker container as the pods will run it (TrainJob: the runtime's "node" container with
    the TrainJob's trainer fields applied, as Trainer v2's torch plugin does)."""
    if "PyTorchJob" in d.by_kind:
        job = d.by_kind["PyTorchJob"][0]
        pod = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
        container = next((c for c in pod["spec"]["containers"] if c["name"] == "pytorch"), None)
        assert container, 'the PyTorchJob\'s Worker has no container named "pytorch"'
        return pod, container, job["metadata"].get("namespace")
    assert "TrainJob" in d.by_kind, f"neither a PyTorchJob nor a TrainJob written: {sorted(d.by_kind)}"
    job = d.by_kind["TrainJob"][0]
    ref = job["spec"]["runtimeRef"]
    runtime = next((r for r in d.by_kind.get("TrainingRuntime", []) if r["metadata"]["name"] == ref["name"]), None)
    assert runtime, f"TrainJob's runtimeRef {ref['name']} names no TrainingRuntime written here"
    assert ref.get("kind") == "TrainingRuntime"
    assert runtime["metadata"].get("namespace") == job["metadata"].get("namespace")
    rj = next((j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]
               if ((j["template"].get("metadata") or {}).get("labels") or {})
               .get("trainer.kubeflow.org/trainjob-ancestor-step") == "trainer"), None)
    assert rj, "no replicated job labelled as the trainer step (the torch plugin would find no trainer)"
    pod = rj["template"]["spec"]["template"]
    node = next((c for c in pod["spec"]["containers"] if c["name"] == "node"), None)
    assert node, 'the trainer step has no container named "node"'
    t = job["spec"]["trainer"]
    container = {**node, "image": t.get("image", node.get("image")), "command": t.get("command", node.get("command")),
                 "resources": t.get("resourcesPerNode", node.get("resources"))}
    return pod, container, job["metadata"].get("namespace")


def check_deployment(d, nnodes, nproc, claim, claim_written, limits=None):
    # Every object is valid for its schema; core pod templates strictly too.
    for o in d.objects:
        assert validate(o) == [], f"{o['kind']} {o['metadata']['name']}"
    for sts in d.by_kind.get("StatefulSet", []):
        errors = schema_errors(POD_TEMPLATE, sts["spec"]["template"])
        assert errors == [], f"pod template of StatefulSet {sts['metadata']['name']}"

    pod, container, ns = worker_pod(d)
    argv = container["command"]
    assert argv[:2] == ["cadre", "run"]
    assert "--" in argv, f"no -- before the program in {' '.join(argv)}"
    program = argv[argv.index("--") + 1:]
    assert program[:2] == ["cadre", "train"]
    assert flag(argv, "--rdzv-backend") == "etcd"
    assert flag(argv, "--nnodes") == nnodes
    assert flag(argv, "--nproc-per-node") == str(nproc)

    # etcd: every endpoint the workers get resolves to a written Service and reaches an etcd
    # member; the members' own peer and client URLs resolve too.
    endpoints = flag(argv, "--rdzv-endpoint").split(",")
    assert len(endpoints) == 3, endpoints
    members = set()
    for e in endpoints:
        host, port = e.split(":")
        r = resolve(host, int(port), ns, d.objects)
        assert r["statefulSet"]["spec"]["template"]["spec"]["containers"][0]["command"][0].endswith("etcd"), e
        members.add(r["pod"])
    assert len(members) == 3, f"the endpoints do not name three different members: {endpoints}"
    etcd = d.by_kind["StatefulSet"][0]
    eargs = etcd["spec"]["template"]["spec"]["containers"][0]["args"]

    def arg(k):
        found = [a for a in eargs if a.startswith(f"--{k}=")]
        assert found, f"etcd has no --{k}= argument: {eargs}"
        return found[0].split("=", 1)[1]

    cluster = [m.split("=", 1) for m in arg("initial-cluster").split(",")]
    assert len(cluster) == etcd["spec"]["replicas"]
    for member, url in cluster:
        u = urlsplit(url)
        assert resolve(u.hostname, u.port, ns, d.objects)["pod"] == member, url
    for i in range(etcd["spec"]["replicas"]):
        pod_name = f"{etcd['metadata']['name']}-{i}"
        for k in ("advertise-client-urls", "initial-advertise-peer-urls"):
            u = urlsplit(arg(k).replace("$(POD_NAME)", pod_name))
            assert resolve(u.hostname, u.port, ns, d.objects)["pod"] == pod_name, f"{k} of {pod_name}"
    assert etcd["spec"].get("podManagementPolicy") == "Parallel", "etcd members must start together"
    peers = next((s for s in d.by_kind["Service"] if s["metadata"]["name"] == etcd["spec"]["serviceName"]), None)
    assert peers, f"no Service {etcd['spec']['serviceName']} (the etcd StatefulSet's serviceName)"
    assert peers["spec"].get("publishNotReadyAddresses") is True, \
        f"Service {peers['metadata']['name']} must publish not-ready members (etcd peers find each other before ready)"

    # The rendezvous id: set, never torchrun's colliding default.
    rdzv_id = flag(argv, "--rdzv-id")
    assert rdzv_id and rdzv_id != "none"

    # Volumes: the config is mounted from the ConfigMap written, and every path it reads or
    # writes resolves (from the working directory) onto the claim's mount.
    def volume(name):
        return next((v for v in pod["spec"]["volumes"] if v["name"] == name), None)

    def mount_of(p):
        mounts = [m for m in container.get("volumeMounts", [])
                  if p == m["mountPath"] or p.startswith(m["mountPath"].rstrip("/") + "/")]
        return max(mounts, key=lambda m: len(m["mountPath"]), default=None)

    config_path = flag(program, "--config")
    config_mount = mount_of(config_path)
    assert config_mount, f"{config_path} is not on a mounted volume"
    cm_name = (volume(config_mount["name"]).get("configMap") or {}).get("name")
    cm = next((c for c in d.by_kind.get("ConfigMap", []) if c["metadata"]["name"] == cm_name), None)
    assert cm, f"{config_path} is not mounted from a ConfigMap written here"
    key = posixpath.relpath(config_path, config_mount["mountPath"])
    assert key in (cm.get("data") or {}), f"ConfigMap {cm['metadata']['name']} has no key for {config_path}"
    config = yaml.safe_load(cm["data"][key])
    assert config, f"ConfigMap {cm['metadata']['name']}'s {key} is empty"

    def on_claim(what, p):
        absolute = posixpath.normpath(posixpath.join(container["workingDir"], p))
        m = mount_of(absolute)
        assert m, f"{what} '{p}' ({absolute}) is on no mounted volume"
        name = (volume(m["name"]).get("persistentVolumeClaim") or {}).get("claimName")
        assert name, f"{what} '{p}' is on volume {m['name']}, which is not a PersistentVolumeClaim"
        return name

    claims = {on_claim("data.dir", config["data"]["dir"]), on_claim("run.dir", config["run"]["dir"]),
              on_claim("--log-dir", flag(argv, "--log-dir").replace("$(POD_NAME)", "p"))}
    if config["checkpoint"].get("dir"):
        claims.add(on_claim("checkpoint.dir", config["checkpoint"]["dir"]))
    assert claims == {claim}, f"the config's paths are on claims {claims}, expected only {claim}"
    pvc = next((c for c in d.by_kind.get("PersistentVolumeClaim", []) if c["metadata"]["name"] == claim), None)
    if claim_written:
        assert pvc, f"no PersistentVolumeClaim {claim} written"
        assert pvc["spec"]["accessModes"] == ["ReadWriteMany"]
    else:
        assert pvc is None, "an existing claim was named, yet one was written"
    shm_mount = mount_of("/dev/shm/x")
    assert shm_mount, "nothing is mounted on /dev/shm"
    assert (volume(shm_mount["name"]).get("emptyDir") or {}).get("medium") == "Memory", "/dev/shm is not a memory emptyDir"

    # Graceful termination: the agent gives its workers less time than Kubernetes gives the pod.
    assert float(flag(argv, "--stop-timeout")) < pod["spec"]["terminationGracePeriodSeconds"]
    # Prometheus: the annotated port is the container's metrics port.
    metrics = next((p for p in container.get("ports", []) if p.get("name") == "metrics"), None)
    assert metrics, "the worker container has no port named metrics"
    annotations = pod["metadata"].get("annotations") or {}
    assert annotations.get("prometheus.io/port") == str(metrics["containerPort"])
    assert annotations.get("prometheus.io/scrape") == "true"
    # ... and the agent serves /metrics there, on the pod's address.
    assert flag(argv, "--metrics-port") == str(metrics["containerPort"])
    assert flag(argv, "--metrics-addr") == "$(POD_IP)"
    # Resources per node.
    for k, v in (limits or {}).items():
        assert str(container["resources"]["limits"].get(k)) == v, k
    return {"rdzv_id": rdzv_id, "argv": argv, "config": config}


# ---------------------------------------------------------------------------------------------
# Tests


def test_trainjob_elastic_2_to_4_nodes_gpus_and_efa(work):
    d = deployed(work, "tiny-a", ["--set", "data.dir=data/tiny", "checkpoint.interval=10", "--nodes", "2:4",
                                  "--nproc-per-node", "2", "--image", "registry.example/cadre:0.1", "--cpu", "8",
                                  "--memory", "32Gi", "--gpus", "1", "--efa", "1"])
    r = check_deployment(d, nnodes="2:4", nproc=2, claim="tiny-a-data", claim_written=True,
                         limits={"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1", "vpc.amazonaws.com/efa": "1"})
    job = d.by_kind["TrainJob"][0]
    assert job["spec"]["trainer"]["numNodes"] == 4, "MAX pods: cadre's rendezvous runs with any 2..4 of them"
    assert job["spec"]["trainer"]["numProcPerNode"] == 2
    assert r["config"]["data"]["dir"] == "data/tiny", "the ConfigMap holds the config with --set applied"
    assert r["config"]["checkpoint"]["interval"] == 10
    # Trainer v2 reserves the PET_* variables for its torch plugin.
    assert not [e["name"] for e in job["spec"]["trainer"].get("env") or [] if e["name"].startswith("PET_")]


def test_cuda_device_defaults_gpus_to_the_workers_per_node(work):
    # train.device: cuda and no --gpus: one nvidia.com/gpu per local rank; CPU jobs ask for none.
    d = deployed(work, "tiny-g", ["--set", "data.dir=data/tiny", "train.device=cuda", "--nproc-per-node", "2",
                                  "--image", "registry.example/cadre:0.1"])
    check_deployment(d, nnodes="1", nproc=2, claim="tiny-g-data", claim_written=True, limits={"nvidia.com/gpu": "2"})
    cpu = deployed(work, "tiny-c", ["--set", "data.dir=data/tiny", "--nproc-per-node", "2",
                                    "--image", "registry.example/cadre:0.1"])
    for o in cpu.objects:
        assert "nvidia.com/gpu" not in json.dumps(o), f"{o['kind']} asks for a GPU on a CPU job"


def test_nccl_environment_of_the_deploying_shell_reaches_the_workers(work):
    out = os.path.join(work, "tiny-n")
    env = {**os.environ, "NCCL_DEBUG": "INFO", "NCCL_SOCKET_IFNAME": "eth0"}
    r = subprocess.run([CADRE, "deploy", "k8s", "--config", TINY_CONFIG, "--name", "tiny-n", "--out", out,
                        "--set", "data.dir=data/tiny", "train.device=cuda", "--image", "registry.example/cadre:0.1"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    objects = [o for f in sorted(os.listdir(out)) for o in read_manifests(os.path.join(out, f))]
    # The training workers (the rendezvous etcd needs no NCCL).
    workers = [c for o in objects for c in json_find(o, "containers") if c["name"] not in ("etcd", "dcgm-exporter")]
    assert workers, "no worker containers in the manifests"
    for c in workers:
        env_of = {e["name"]: e.get("value") for e in c.get("env", [])}
        assert env_of.get("NCCL_DEBUG") == "INFO" and env_of.get("NCCL_SOCKET_IFNAME") == "eth0", c["name"]


def json_find(node, key):
    """Every list under `key` anywhere in a manifest, flattened."""
    found = []
    if isinstance(node, dict):
        for k, v in node.items():
            if k == key and isinstance(v, list):
                found += v
            else:
                found += json_find(v, key)
    elif isinstance(node, list):
        for v in node:
            found += json_find(v, key)
    return found


def test_pytorchjob_elastic_policy_on_existing_claim_in_another_namespace(work):
    d = deployed(work, "tiny-b", ["--api", "pytorchjob", "--set", "data.dir=/mnt/fsx/data/tiny", "run.dir=runs/b",
                                  "checkpoint.dir=/mnt/fsx/ckpt/b", "--nodes", "1:3", "--max-restarts", "5",
                                  "--image", "registry.example/cadre:0.1", "--namespace", "training",
                                  "--volume-claim", "fsx", "--mount-path", "/mnt/fsx"])
    r = check_deployment(d, nnodes="1:3", nproc=1, claim="fsx", claim_written=False)
    job = d.by_kind["PyTorchJob"][0]
    e = job["spec"]["elasticPolicy"]
    assert [e["minReplicas"], e["maxReplicas"]] == [1, 3]
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 3
    assert e["maxRestarts"] == float(flag(r["argv"], "--max-restarts"))
    assert e["rdzvBackend"] == flag(r["argv"], "--rdzv-backend")
    assert e["rdzvId"] == r["rdzv_id"], "the operator's PET_RDZV_ID and the workers' --rdzv-id differ"
    assert job["spec"]["nprocPerNode"] == flag(r["argv"], "--nproc-per-node")
    # PET_RDZV_ENDPOINT (rdzvHost:rdzvPort) reaches the same etcd as the workers' endpoints.
    via_policy = resolve(e["rdzvHost"], e["rdzvPort"], "training", d.objects)
    h, p = flag(r["argv"], "--rdzv-endpoint").split(",")[0].split(":")
    assert via_policy["statefulSet"] is resolve(h, int(p), "training", d.objects)["statefulSet"]
    # The training operator's admission rules (webhook, not schema).
    assert "Master" not in job["spec"]["pytorchReplicaSpecs"]
    assert all(c.get("image") for c in job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"])
    assert DNS_1035.fullmatch(job["metadata"]["name"]), "name must be a DNS-1035 label"
    for o in d.objects:
        assert o["metadata"].get("namespace") == "training", f"{o['kind']} {o['metadata']['name']}"


def test_rendezvous_id_unique_per_deployment_also_of_the_same_config(work):
    args = ["--set", "data.dir=data/tiny", "--image", "registry.example/cadre:0.1"]
    # Two jobs, then the first one deployed again.
    ids = [check_deployment(deployed(work, name, args), nnodes="1", nproc=1, claim=f"{name}-data",
                            claim_written=True)["rdzv_id"]
           for name in ("tiny-c", "tiny-c2", "tiny-c")]
    assert len(set(ids)) == 3, f"ids collide: {ids}"


def _matching(problems, pattern):
    return any(re.search(pattern, p) for p in problems)


def test_validators_reject_what_the_api_server_would(work):
    """Negative controls: each validator refuses a manifest broken the way it must notice."""
    d = deployed(work, "tiny-d", ["--set", "data.dir=data/tiny", "--image", "registry.example/cadre:0.1"])
    assert validate(d.by_kind["TrainJob"][0]) == []  # the controls start from valid objects

    job = copy.deepcopy(d.by_kind["TrainJob"][0])
    job["spec"]["trainer"]["numNodes"] = "4"
    problems = validate(job)
    assert _matching(problems, r"^/spec/trainer/numNodes: '4' is not of type 'integer'"), problems

    runtime = copy.deepcopy(d.by_kind["TrainingRuntime"][0])
    runtime["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0][
        "imagePullPolicy_"] = "Always"
    problems = validate(runtime)
    assert _matching(problems, r"Additional properties are not allowed \('imagePullPolicy_' was unexpected\)"), problems
    runtime["spec"]["mlPolicy"]["mpi"] = {}
    problems = validate(runtime)
    assert _matching(problems, r"^/spec/mlPolicy: Only one of the policy can be configured$"), problems  # a CEL rule

    named = copy.deepcopy(d.by_kind["TrainJob"][0])
    named["metadata"]["name"] = "Tiny_D"
    problems = validate(named)
    assert _matching(problems, r"^/: metadata\.name must match RFC 1035 DNS label format$"), problems  # a CEL rule
    labelled = copy.deepcopy(d.by_kind["TrainJob"][0])
    labelled["metadata"]["labels"] = {"app": 7}
    problems = validate(labelled)
    assert _matching(problems, r"^/metadata/labels/app: 7 is not of type"), problems  # ObjectMeta of a CRD kind

    sts = copy.deepcopy(d.by_kind["StatefulSet"][0])
    sts["spec"]["replicas"] = "three"
    problems = validate(sts)
    assert _matching(problems, r"^/spec/replicas: 'three' is not of type"), problems
    unknown = copy.deepcopy(d.by_kind["StatefulSet"][0])
    unknown["spec"]["replica"] = 3
    problems = validate(unknown)
    assert _matching(problems, r"'replica' was unexpected"), problems  # core kinds are checked strictly
    ports = sts["spec"]["template"]["spec"]["containers"][0]["ports"]
    ports.append({"name": "again", "containerPort": ports[0]["containerPort"]})
    problems = schema_errors(POD_TEMPLATE, sts["spec"]["template"])
    assert _matching(problems, rf"^/spec/containers/0/ports: duplicate map entry \[{ports[0]['containerPort']}, \"TCP\"\]$"), \
        f"a duplicate containerPort must be refused (list-map keys): {problems}"
    assert validate({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w"}}) == \
        ["no schema for example.org/v1/Widget"]

    # And the semantic check notices an endpoint that resolves nowhere.
    with pytest.raises(AssertionError, match="member"):
        resolve("tiny-d-etcd-3.tiny-d-etcd-peers.default.svc", 2379, "default", d.objects)
    with pytest.raises(AssertionError, match="does not resolve"):
        resolve("etcd.default.svc", 2379, "default", d.objects)


K8S_BAD_INPUT = [
    (["--image", "x", "--nodes", "3:2"], r"deploy\.nodes \(--nodes\) 3:2: MIN \(3\) must not exceed MAX \(2\)"),
    (["--image", "x", "--set", "parallel.strategy=ZERO3"], r"parallel\.strategy: unknown 'ZERO3'"),
    ([], r"deploy\.image \(--image\) is required for Kubernetes"),
    (["--image", "x", "--set", "parallel.strategy=HYBRID_SHARD", "parallel.shard_group_size=4", "--nodes", "1:3",
      "--nproc-per-node", "2"], r"--nodes\) 1:3 .* cannot run on\n  1 node\(s\) x 2 = 2 ranks: parallel\.shard_group_size 4"),
    (["--image", "x", "--set", "parallel.strategy=HYBRID_SHARD", "--nodes", "1:2"],
     r"1 node: HYBRID_SHARD with parallel\.shard_group_size 0"),
    (["--image", "x", "--api", "mpijob"], r"deploy\.api \(--api\): unknown 'mpijob'"),
    (["--image", "x", "--set", "deploy.gpu=1"], r"unknown key 'deploy\.gpu'"),
    (["--image", "x", "--set", "data.dir=/data/tiny"],
     r"data\.dir '/data/tiny' is not on the shared volume mounted at /workspace"),
    (["--image", "x", "--name", "Tiny"], r"deploy\.name \(--name\): 'Tiny' must be a DNS-1035 label"),
    (["--image", "x", "--memory", "32GB"], r"deploy\.memory \(--memory\): '32GB' is not a Kubernetes quantity"),
    (["--image", "x", "--rdzv-id", "none"], r"deploy\.rdzv_id \(--rdzv-id\): 'none'"),
    (["--image", "x", "--nproc-per-node", "two"], r"deploy\.nproc_per_node \(--nproc-per-node\) expects an integer"),
    (["--image", "x", "--partition", "debug"], r"unknown flag '--partition'"),
]
SLURM_BAD_INPUT = [
    (["--time", "2", "--signal-before", "120"],
     r"deploy\.signal_before \(--signal-before\) \(120 s\) must be shorter than deploy\.time \(--time\) \(2 = 120 s\)"),
    (["--time", "2h"], r"deploy\.time \(--time\): '2h' is not a Slurm time limit"),
    (["--memory", "1.5Gi"], r"deploy\.memory \(--memory\): '1\.5Gi': Slurm takes a whole number"),
    (["--nodes", "0"], r"deploy\.nodes \(--nodes\) \(N or MIN:MAX\) must be a positive integer"),
    (["--image", "x"], r"unknown flag '--image'"),
]


def test_bad_input_exits_2_naming_the_field(work):
    bad = os.path.join(work, "bad")
    base = ["--config", TINY_CONFIG, "--set", "data.dir=data/tiny", "--out", bad]
    for args, message in K8S_BAD_INPUT:
        r = deploy([*base, *args])
        output = r.stdout + r.stderr
        assert r.returncode == 2, f"{' '.join(args)}: exit {r.returncode}\n{output}"
        assert re.search(message, output), f"{' '.join(args)}: no /{message}/ in\n{output}"
    assert not os.path.exists(bad), "bad input must write nothing"
    for args, message in SLURM_BAD_INPUT:
        r = deploy([*base, *args], target="slurm")
        assert r.returncode == 2, f"{' '.join(args)}: exit {r.returncode}\n{r.stderr}"
        assert re.search(message, r.stderr), f"{' '.join(args)}: no /{message}/ in\n{r.stderr}"
    assert not os.path.exists(bad), "bad input must write nothing"


@pytest.mark.parametrize("target, own_flag", [("k8s", "--api"), ("slurm", "--partition")])
def test_help(target, own_flag):
    r = deploy(["--help"], target=target)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "--nodes" in r.stdout
    assert own_flag in r.stdout


# ---------------------------------------------------------------------------------------------
# Monitoring: Prometheus configuration and dcgm-exporter


# kubernetes_sd_config as Prometheus documents it (configuration.md, 2.42): its keys and roles.
K8S_SD_KEYS = {"api_server", "role", "kubeconfig_file", "basic_auth", "authorization", "oauth2", "proxy_url",
               "follow_redirects", "enable_http2", "tls_config", "namespaces", "selectors", "attach_metadata"}
K8S_SD_ROLES = {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}


def k8s_sd_problems(sd):
    problems = [f"unknown key {k}" for k in sd if k not in K8S_SD_KEYS]
    if sd.get("role") not in K8S_SD_ROLES:
        problems.append(f"role {sd.get('role')!r} is none of {sorted(K8S_SD_ROLES)}")
    ns = sd.get("namespaces", {})
    problems += [f"namespaces: unknown key {k}" for k in ns if k not in ("own_namespace", "names")]
    if not all(isinstance(n, str) and n for n in ns.get("names", [])):
        problems.append(f"namespaces.names must be non-empty strings: {ns.get('names')}")
    for s in sd.get("selectors", []):
        if s.get("role") not in K8S_SD_ROLES or set(s) - {"role", "label", "field"}:
            problems.append(f"bad selector {s}")
    return problems


def promtool_check(text, work, name):
    """`promtool check config` of a prometheus.yml text; returns its output, asserting it passed.
    Debian's Prometheus is built without Kubernetes discovery (promtool refuses the key
    kubernetes_sd_configs), so those blocks are checked against Prometheus' documented schema here
    and handed to promtool as static_configs; promtool checks everything else (relabel rules and
    their regexes, job names, intervals)."""
    promtool = shutil.which("promtool")
    assert promtool, "promtool not found (Debian's prometheus package, scripts/setup.sh)"
    config = yaml.safe_load(text)
    for job in config.get("scrape_configs") or []:
        for sd in job.pop("kubernetes_sd_configs", None) or []:
            problems = k8s_sd_problems(sd)
            assert not problems, f"kubernetes_sd_config of job {job.get('job_name')}: {problems}"
            job.setdefault("static_configs", []).append({"targets": ["discovered.invalid:1"]})
    path = os.path.join(work, f"{name}-prometheus.yml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(yaml.safe_dump(config, sort_keys=False))
    r = subprocess.run([promtool, "check", "config", path], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, f"promtool check config {path} exited {r.returncode}\n{r.stdout}{r.stderr}\n{text}"
    return r.stdout + r.stderr


def meta_label(role, label):
    return f"__meta_kubernetes_{role}_label_" + re.sub(r"[^A-Za-z0-9_]", "_", label)


def relabel(rules, labels):
    """Prometheus' keep, drop and replace (its defaults: separator ';', regex (.*), replacement $1)
    on one target's labels; None when the target is dropped."""
    labels = dict(labels)
    for r in rules:
        action = r.get("action", "replace")
        value = r.get("separator", ";").join(labels.get(s, "") for s in r.get("source_labels", []))
        m = re.fullmatch(r.get("regex", "(.*)"), value)
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            labels[r["target_label"]] = re.sub(r"\$(\d+)", lambda g: m.group(int(g[1])) or "", r.get("replacement", "$1"))
        assert action in ("keep", "drop", "replace"), f"relabel action {action} not emulated here"
    return labels


def pod_targets(pod_template, node="gpu-node-1", pod_name="p-0", phase="Running"):
    """The targets Kubernetes pod discovery makes of a pod: one per container port."""
    meta = pod_template["metadata"]
    base = {meta_label("pod", k): v for k, v in (meta.get("labels") or {}).items()}
    base.update({"__meta_kubernetes_pod_name": pod_name, "__meta_kubernetes_pod_node_name": node,
                 "__meta_kubernetes_pod_phase": phase, "__address__": "10.0.0.7"})
    for c in pod_template["spec"]["containers"]:
        for p in c.get("ports", []):
            yield {**base, "__meta_kubernetes_pod_container_port_name": p.get("name", ""),
                   "__address__": f"10.0.0.7:{p['containerPort']}"}


def endpointslice_targets(service, pod_template):
    """The targets endpointslice discovery makes of a Service backed by the pods of a template."""
    selector = service["spec"].get("selector") or {}
    labels = pod_template["metadata"].get("labels") or {}
    if not selector or any(labels.get(k) != v for k, v in selector.items()):
        return []
    out = []
    for sp in service["spec"]["ports"]:
        target = sp.get("targetPort", sp["port"])
        port = next((p for c in pod_template["spec"]["containers"] for p in c.get("ports", [])
                     if p.get("name") == target or p.get("containerPort") == target), None)
        assert port, f"Service {service['metadata']['name']}: targetPort {target} is no container port"
        out.append({"__meta_kubernetes_service_name": service["metadata"]["name"],
                    "__meta_kubernetes_endpointslice_port_name": sp.get("name", ""),
                    "__meta_kubernetes_pod_node_name": "gpu-node-1",
                    "__address__": f"10.0.0.9:{port['containerPort']}"})
    return out


def prometheus_of(d):
    cms = [c for c in d.by_kind.get("ConfigMap", []) if "prometheus.yml" in (c.get("data") or {})]
    assert len(cms) == 1, f"expected one ConfigMap holding prometheus.yml, got {[c['metadata']['name'] for c in cms]}"
    text = cms[0]["data"]["prometheus.yml"]
    return text, yaml.safe_load(text)


def scrape_job(config, name):
    jobs = [j for j in config["scrape_configs"] if j["job_name"] == name]
    assert len(jobs) == 1, f"scrape job {name}: {[j['job_name'] for j in config['scrape_configs']]}"
    return jobs[0]


def check_agents_scraped(d, config, ns):
    """The `cadre` job keeps exactly the worker container's metrics port, on the pod's address."""
    job = scrape_job(config, "cadre")
    assert job.get("honor_labels") is True, "Cadre's own job label (the rendezvous id) must win"
    assert [c["role"] for c in job["kubernetes_sd_configs"]] == ["pod"]
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [ns]
    pod, container, _ = worker_pod(d)
    kept = [t for t in pod_targets(pod) if relabel(job["relabel_configs"], t)]
    metrics = next(p for p in container["ports"] if p["name"] == "metrics")
    assert [t["__address__"] for t in kept] == [f"10.0.0.7:{metrics['containerPort']}"], kept
    labels = relabel(job["relabel_configs"], kept[0])
    assert labels["pod"] == "p-0" and labels["kubernetes_node"] == "gpu-node-1", labels
    assert not [t for t in pod_targets(pod, phase="Succeeded") if relabel(job["relabel_configs"], t)], \
        "finished pods must not be scraped"
    # Another job's workers in the same namespace are not this job's targets.
    other = copy.deepcopy(pod)
    other["metadata"]["labels"]["app.kubernetes.io/instance"] = "someone-else"
    assert not [t for t in pod_targets(other) if relabel(job["relabel_configs"], t)]


def test_cuda_job_writes_dcgm_exporter_and_both_scrape_jobs(work):
    d = deployed(work, "tiny-m", ["--set", "data.dir=data/tiny", "train.device=cuda", "--nproc-per-node", "4",
                                  "--image", "registry.example/cadre:0.1", "--namespace", "training"])
    check_deployment(d, nnodes="1", nproc=4, claim="tiny-m-data", claim_written=True, limits={"nvidia.com/gpu": "4"})
    # The DaemonSet: valid (its pod template strictly too), on GPU nodes, tolerating their taint,
    # watching all of the node's GPUs without taking one.
    daemonsets = d.by_kind.get("DaemonSet", [])
    assert [ds["metadata"]["name"] for ds in daemonsets] == ["tiny-m-dcgm-exporter"]
    ds = daemonsets[0]
    assert schema_errors(POD_TEMPLATE, ds["spec"]["template"]) == []
    assert ds["metadata"]["namespace"] == "training"
    tmpl = ds["spec"]["template"]
    selector = ds["spec"]["selector"]["matchLabels"]
    assert all(tmpl["metadata"]["labels"].get(k) == v for k, v in selector.items()), "selector misses its pods"
    spec = tmpl["spec"]
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in spec["tolerations"]
    [c] = spec["containers"]
    assert re.fullmatch(r"nvcr\.io/nvidia/k8s/dcgm-exporter:\d[\w.-]+", c["image"]), f"unpinned image {c['image']}"
    assert c["ports"] == [{"name": "metrics", "containerPort": 9400, "protocol": "TCP"}]
    assert {"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"} in c["env"]
    assert "nvidia.com/gpu" not in json.dumps(c.get("resources", {})), "the exporter must not take a GPU"
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == "/var/lib/kubelet/pod-resources")
    volume = next(v for v in spec["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["path"] == "/var/lib/kubelet/pod-resources"
    # The Service reaches the DaemonSet's port 9400.
    service = next(s for s in d.by_kind["Service"] if s["metadata"]["name"] == "tiny-m-dcgm-exporter")
    endpoints = endpointslice_targets(service, tmpl)
    assert [e["__address__"] for e in endpoints] == ["10.0.0.9:9400"], endpoints

    # Prometheus: promtool accepts the configuration; `cadre` keeps the workers' metrics port and
    # `dcgm-exporter` keeps the exporter's endpoints, in the job's namespace.
    text, config = prometheus_of(d)
    promtool_check(text, work, "tiny-m")
    assert [j["job_name"] for j in config["scrape_configs"]] == ["cadre", "dcgm-exporter"]
    check_agents_scraped(d, config, "training")
    dcgm = scrape_job(config, "dcgm-exporter")
    assert [c["role"] for c in dcgm["kubernetes_sd_configs"]] == ["endpointslice"]
    assert dcgm["kubernetes_sd_configs"][0]["namespaces"]["names"] == ["training"]
    assert not dcgm.get("honor_labels"), "job=\"dcgm-exporter\" must tell its series from Cadre's own DCGM_FI_* ones"
    kept = [relabel(dcgm["relabel_configs"], e) for e in endpoints]
    assert kept and all(kept) and kept[0]["kubernetes_node"] == "gpu-node-1", kept
    # ... and nothing of the workers' pods, nor a Service of another name.
    etcd_client = next(s for s in d.by_kind["Service"] if s["metadata"]["name"] == "tiny-m-etcd")
    assert not [t for t in endpointslice_targets(etcd_client, d.by_kind["StatefulSet"][0]["spec"]["template"])
                if relabel(dcgm["relabel_configs"], t)]
    assert "dcgm" in d.output and "30-dcgm-exporter.yaml" in d.output


def test_cpu_job_has_no_dcgm_and_a_rewrite_removes_it(work):
    args = ["--set", "data.dir=data/tiny", "--image", "registry.example/cadre:0.1"]
    deployed(work, "tiny-p", [*args, "--set", "train.device=cuda"])
    assert os.path.exists(os.path.join(work, "tiny-p", "30-dcgm-exporter.yaml"))
    # The same job written again for the CPU into the same directory: the stale exporter goes.
    d = deployed(work, "tiny-p", args)
    check_deployment(d, nnodes="1", nproc=1, claim="tiny-p-data", claim_written=True)
    assert not os.path.exists(os.path.join(work, "tiny-p", "30-dcgm-exporter.yaml"))
    for o in d.objects:
        assert "dcgm" not in json.dumps(o).lower(), f"{o['kind']} {o['metadata']['name']} mentions DCGM on a CPU job"
    assert "DaemonSet" not in d.by_kind
    text, config = prometheus_of(d)
    promtool_check(text, work, "tiny-p")
    assert [j["job_name"] for j in config["scrape_configs"]] == ["cadre"]
    check_agents_scraped(d, config, "default")


def test_monitoring_checks_catch_broken_configurations(work):
    """Negative controls: promtool, the relabel emulation and the Service check notice breakage."""
    d = deployed(work, "tiny-q", ["--set", "data.dir=data/tiny", "train.device=cuda",
                                  "--image", "registry.example/cadre:0.1"])
    text, config = prometheus_of(d)
    broken = copy.deepcopy(config)
    broken["scrape_configs"][1]["job_name"] = "cadre"
    with pytest.raises(AssertionError, match="promtool check config"):
        promtool_check(yaml.safe_dump(broken), work, "tiny-q-duplicate")
    broken = copy.deepcopy(config)
    broken["scrape_configs"][0]["kubernetes_sd_configs"][0]["role"] = "pods"
    with pytest.raises(AssertionError, match="role 'pods' is none of"):
        promtool_check(yaml.safe_dump(broken), work, "tiny-q-role")
    broken = copy.deepcopy(config)
    broken["scrape_configs"][0]["relabel_configs"][0]["action"] = "kept"
    with pytest.raises(AssertionError, match="promtool check config"):
        promtool_check(yaml.safe_dump(broken), work, "tiny-q-action")
    # A scrape job keeping another port name finds no agent.
    renamed = copy.deepcopy(config)
    for r in scrape_job(renamed, "cadre")["relabel_configs"]:
        if r.get("source_labels") == ["__meta_kubernetes_pod_container_port_name"]:
            r["regex"] = "metric"
    with pytest.raises(AssertionError, match=r"^\[\]"):
        check_agents_scraped(d, renamed, "default")
    # A Service whose selector misses the DaemonSet's pods reaches nothing.
    ds = d.by_kind["DaemonSet"][0]
    service = copy.deepcopy(next(s for s in d.by_kind["Service"] if s["metadata"]["name"] == "tiny-q-dcgm-exporter"))
    service["spec"]["selector"]["app.kubernetes.io/component"] = "worker"
    assert endpointslice_targets(service, ds["spec"]["template"]) == []
    # And the DaemonSet's schema check refuses an unknown field.
    ds = copy.deepcopy(ds)
    ds["spec"]["template"]["spec"]["nodeSelectors"] = {}
    assert _matching(validate(ds), r"'nodeSelectors' was unexpected"), validate(ds)


def test_static_prometheus_example_for_slurm_nodes(work):
    """deploy/prometheus/prometheus.yml (Slurm and bare nodes): valid, the agents on deploy's
    metrics port and dcgm-exporter on its own, never the same port of a node."""
    with open(os.path.join(SOURCE, "deploy/prometheus/prometheus.yml"), encoding="utf-8") as f:
        text = f.read()
    promtool_check(text, work, "static")
    config = yaml.safe_load(text)
    agents = {t for c in scrape_job(config, "cadre")["static_configs"] for t in c["targets"]}
    dcgm = {t for c in scrape_job(config, "dcgm-exporter")["static_configs"] for t in c["targets"]}
    assert {t.rsplit(":", 1)[1] for t in agents} == {"9464"}, agents
    assert {t.rsplit(":", 1)[1] for t in dcgm} == {"9400"}, dcgm
    assert not agents & dcgm
