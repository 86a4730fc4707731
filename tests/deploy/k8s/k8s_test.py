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
# Also: bad input exits 2 naming the field. Run by ctest (DeployK8sSchemas) with CADRE_BIN and
# CADRE_SOURCE_DIR set, under the project venv (python/requirements.txt, scripts/setup.sh).
import copy
import datetime
import json
import os
import posixpath
import re
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
    workers = [c for o in objects for c in json_find(o, "containers") if c["name"] != "etcd"]
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
