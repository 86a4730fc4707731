// `cadre deploy k8s` output against the real schemas (schemas.mjs) and the semantics a schema
// cannot see: the etcd endpoints workers get resolve to the Services written, the rendezvous id
// is shared by a job and unique per deployment, the config's paths lie on the mounted volume,
// the rendezvous settings of the PyTorchJob's elasticPolicy agree with the workers' flags.
// Also: bad input exits 2 naming the field. Run by ctest (DeployK8sSchemas) with CADRE_BIN and
// CADRE_SOURCE_DIR set; node_modules comes from scripts/setup.sh.
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { parse } from "yaml";

import { loadCrd, podTemplateValidator, readManifests, validate } from "./schemas.mjs";

const cadre = process.env.CADRE_BIN;
const source = process.env.CADRE_SOURCE_DIR;
assert.ok(cadre && source, "CADRE_BIN and CADRE_SOURCE_DIR must be set");
const tinyConfig = path.join(source, "configs/tiny.yaml");
const work = fs.mkdtempSync(path.join(os.tmpdir(), "cadre-deploy-k8s-"));
process.on("exit", () => fs.rmSync(work, { recursive: true, force: true }));

const runtimeCrd = loadCrd("trainer.kubeflow.org_trainingruntimes.yaml");
loadCrd("trainer.kubeflow.org_trainjobs.yaml");
loadCrd("kubeflow.org_pytorchjobs.yaml");
const checkPodTemplate = podTemplateValidator(runtimeCrd);

function deploy(args) {
  const r = spawnSync(cadre, ["deploy", "k8s", ...args], { encoding: "utf8" });
  return { status: r.status, output: r.stdout + r.stderr };
}

// Writes a deployment and returns its objects by kind.
function deployed(name, args) {
  const out = path.join(work, name);
  const r = deploy(["--config", tinyConfig, "--name", name, "--out", out, ...args]);
  assert.equal(r.status, 0, r.output);
  const objects = fs.readdirSync(out).sort().flatMap((f) => readManifests(path.join(out, f)));
  const byKind = {};
  for (const o of objects) (byKind[o.kind] ??= []).push(o);
  return { objects, byKind, output: r.output };
}

// A flag's value in an argv list.
function flag(argv, name) {
  const i = argv.indexOf(name);
  assert.ok(i >= 0 && i + 1 < argv.length, `${name} missing in ${argv.join(" ")}`);
  return argv[i + 1];
}

// Cluster DNS as kube-dns answers a pod in namespace `ns` (search path <ns>.svc, svc,
// cluster.local): a Service name, or <pod>.<headless service> for a StatefulSet member.
// Returns what the name reaches, or throws saying why it does not resolve.
function resolve(host, port, ns, objects) {
  const services = objects.filter((o) => o.kind === "Service");
  const labels = (sel, l) => Object.entries(sel).every(([k, v]) => l?.[k] === v);
  let name = host.replace(/\.cluster\.local$/, "");
  let parts = name.split(".");
  if (parts.at(-1) === "svc") parts = parts.slice(0, -1);
  // [svc] [svc, ns] [pod, svc] [pod, svc, ns]
  const candidates = [];
  if (parts.length === 1) candidates.push({ svc: parts[0], ns });
  if (parts.length === 2) candidates.push({ svc: parts[0], ns: parts[1] }, { pod: parts[0], svc: parts[1], ns });
  if (parts.length === 3) candidates.push({ pod: parts[0], svc: parts[1], ns: parts[2] });
  for (const c of candidates) {
    const svc = services.find((s) => s.metadata.name === c.svc && (s.metadata.namespace ?? "default") === c.ns);
    if (!svc) continue;
    const sp = svc.spec.ports.find((p) => p.port === port);
    assert.ok(sp, `${host}:${port}: Service ${c.svc} has no port ${port}`);
    const backends = objects.filter((o) => o.kind === "StatefulSet" && (o.metadata.namespace ?? "default") === c.ns &&
                                           labels(svc.spec.selector, o.spec.template.metadata.labels));
    assert.ok(backends.length, `${host}: Service ${c.svc} selects no pods written here`);
    for (const sts of backends) {
      const container = sts.spec.template.spec.containers[0];
      const target = sp.targetPort ?? sp.port;
      assert.ok(container.ports.some((p) => p.containerPort === target || p.name === target),
                `${host}:${port}: target port ${target} is not a port of ${sts.metadata.name}'s container`);
    }
    if (!c.pod) return { service: svc, statefulSet: backends[0] };
    assert.equal(svc.spec.clusterIP, "None", `${host}: per-pod names need a headless Service, ${c.svc} is not`);
    const sts = backends.find((s) => s.spec.serviceName === c.svc);
    assert.ok(sts, `${host}: no StatefulSet with serviceName ${c.svc}`);
    const m = c.pod.match(new RegExp(`^${sts.metadata.name}-(\\d+)$`));
    assert.ok(m && Number(m[1]) < sts.spec.replicas, `${host}: ${c.pod} is not a member of ${sts.metadata.name}`);
    return { service: svc, statefulSet: sts, pod: c.pod };
  }
  throw new Error(`${host}:${port} does not resolve to a Service written here`);
}

// The worker container as the pods will run it (TrainJob: the runtime's "node" container with
// the TrainJob's trainer fields applied, as Trainer v2's torch plugin does).
function workerPod(d) {
  if (d.byKind.PyTorchJob) {
    const job = d.byKind.PyTorchJob[0];
    const pod = job.spec.pytorchReplicaSpecs.Worker.template;
    return { pod, container: pod.spec.containers.find((c) => c.name === "pytorch"), ns: job.metadata.namespace };
  }
  const job = d.byKind.TrainJob[0];
  const runtime = d.byKind.TrainingRuntime.find((r) => r.metadata.name === job.spec.runtimeRef.name);
  assert.ok(runtime, `TrainJob's runtimeRef ${job.spec.runtimeRef.name} names no TrainingRuntime written here`);
  assert.equal(job.spec.runtimeRef.kind, "TrainingRuntime");
  assert.equal(runtime.metadata.namespace, job.metadata.namespace);
  const rj = runtime.spec.template.spec.replicatedJobs.find(
    (j) => j.template.metadata?.labels?.["trainer.kubeflow.org/trainjob-ancestor-step"] === "trainer");
  assert.ok(rj, "no replicated job labelled as the trainer step (the torch plugin would find no trainer)");
  const pod = rj.template.spec.template;
  const node = pod.spec.containers.find((c) => c.name === "node");
  assert.ok(node, 'the trainer step has no container named "node"');
  const t = job.spec.trainer;
  const container = { ...node, image: t.image ?? node.image, command: t.command ?? node.command,
                      resources: t.resourcesPerNode ?? node.resources };
  return { pod, container, ns: job.metadata.namespace };
}

function checkDeployment(d, expect) {
  // Every object is valid for its schema; core pod templates strictly too.
  for (const o of d.objects) assert.deepEqual(validate(o), [], `${o.kind} ${o.metadata.name}`);
  for (const sts of d.byKind.StatefulSet ?? [])
    assert.ok(checkPodTemplate(sts.spec.template), JSON.stringify(checkPodTemplate.errors));

  const { pod, container, ns } = workerPod(d);
  const argv = container.command;
  assert.deepEqual(argv.slice(0, 2), ["cadre", "run"]);
  const program = argv.slice(argv.indexOf("--") + 1);
  assert.deepEqual(program.slice(0, 2), ["cadre", "train"]);
  assert.equal(flag(argv, "--rdzv-backend"), "etcd");
  assert.equal(flag(argv, "--nnodes"), expect.nnodes);
  assert.equal(flag(argv, "--nproc-per-node"), String(expect.nproc));

  // etcd: every endpoint the workers get resolves to a written Service and reaches an etcd
  // member; the members' own peer and client URLs resolve too.
  const endpoints = flag(argv, "--rdzv-endpoint").split(",");
  assert.equal(endpoints.length, 3);
  const members = new Set();
  for (const e of endpoints) {
    const [host, port] = e.split(":");
    const r = resolve(host, Number(port), ns, d.objects);
    assert.ok(r.statefulSet.spec.template.spec.containers[0].command[0].endsWith("etcd"));
    members.add(r.pod);
  }
  assert.equal(members.size, 3, "the endpoints do not name three different members");
  const etcd = d.byKind.StatefulSet[0];
  const eargs = etcd.spec.template.spec.containers[0].args;
  const arg = (k) => eargs.find((a) => a.startsWith(`--${k}=`)).split("=").slice(1).join("=");
  const cluster = arg("initial-cluster").split(",").map((m) => m.split("="));
  assert.equal(cluster.length, etcd.spec.replicas);
  for (const [member, url] of cluster) {
    const u = new URL(url);
    assert.equal(resolve(u.hostname, Number(u.port), ns, d.objects).pod, member);
  }
  for (let i = 0; i < etcd.spec.replicas; ++i) {
    const pod = `${etcd.metadata.name}-${i}`;
    for (const k of ["advertise-client-urls", "initial-advertise-peer-urls"]) {
      const u = new URL(arg(k).replaceAll("$(POD_NAME)", pod));
      assert.equal(resolve(u.hostname, Number(u.port), ns, d.objects).pod, pod, `${k} of ${pod}`);
    }
  }
  assert.equal(etcd.spec.podManagementPolicy, "Parallel");
  assert.equal(d.byKind.Service.find((s) => s.metadata.name === etcd.spec.serviceName).spec.publishNotReadyAddresses, true);

  // The rendezvous id: set, never torchrun's colliding default.
  const rdzvId = flag(argv, "--rdzv-id");
  assert.ok(rdzvId && rdzvId !== "none");

  // Volumes: the config is mounted from the ConfigMap written, and every path it reads or
  // writes resolves (from the working directory) onto the claim's mount.
  const volume = (name) => pod.spec.volumes.find((v) => v.name === name);
  const mountOf = (p) => container.volumeMounts
    .filter((m) => p === m.mountPath || p.startsWith(m.mountPath.replace(/\/?$/, "/")))
    .sort((a, b) => b.mountPath.length - a.mountPath.length)[0];
  const configPath = flag(program, "--config");
  const configMount = mountOf(configPath);
  assert.ok(configMount, `${configPath} is not on a mounted volume`);
  const cm = d.byKind.ConfigMap.find((c) => c.metadata.name === volume(configMount.name).configMap?.name);
  assert.ok(cm, `${configPath} is not mounted from a ConfigMap written here`);
  const config = parse(cm.data[path.relative(configMount.mountPath, configPath)]);
  assert.ok(config, `ConfigMap ${cm.metadata.name} has no key for ${configPath}`);
  const onClaim = (key, p) => {
    const abs = path.resolve(container.workingDir, p);
    const m = mountOf(abs);
    assert.ok(m, `${key} '${p}' (${abs}) is on no mounted volume`);
    const claim = volume(m.name).persistentVolumeClaim?.claimName;
    assert.ok(claim, `${key} '${p}' is on volume ${m.name}, which is not a PersistentVolumeClaim`);
    return claim;
  };
  const claims = new Set([onClaim("data.dir", config.data.dir), onClaim("run.dir", config.run.dir),
                          onClaim("--log-dir", flag(argv, "--log-dir").replace("$(POD_NAME)", "p"))]);
  if (config.checkpoint.dir) claims.add(onClaim("checkpoint.dir", config.checkpoint.dir));
  assert.equal(claims.size, 1);
  const [claim] = claims;
  assert.equal(claim, expect.claim);
  const pvc = (d.byKind.PersistentVolumeClaim ?? []).find((c) => c.metadata.name === claim);
  if (expect.claimWritten) assert.deepEqual(pvc.spec.accessModes, ["ReadWriteMany"]);
  else assert.equal(pvc, undefined, "an existing claim was named, yet one was written");
  const shm = volume(mountOf("/dev/shm/x").name);
  assert.equal(shm.emptyDir.medium, "Memory");

  // Graceful termination: the agent gives its workers less time than Kubernetes gives the pod.
  assert.ok(Number(flag(argv, "--stop-timeout")) < pod.spec.terminationGracePeriodSeconds);
  // Prometheus: the annotated port is the container's metrics port.
  const metrics = container.ports.find((p) => p.name === "metrics");
  assert.equal(pod.metadata.annotations["prometheus.io/port"], String(metrics.containerPort));
  assert.equal(pod.metadata.annotations["prometheus.io/scrape"], "true");
  // ... and the agent serves /metrics there, on the pod's address.
  assert.equal(flag(argv, "--metrics-port"), String(metrics.containerPort));
  assert.equal(flag(argv, "--metrics-addr"), "$(POD_IP)");
  // Resources per node.
  for (const [k, v] of Object.entries(expect.limits ?? {})) assert.equal(String(container.resources.limits[k]), v, k);
  return { rdzvId, argv, config };
}

test("TrainJob + TrainingRuntime, elastic 2:4 nodes, GPUs and EFA", () => {
  const d = deployed("tiny-a", ["--set", "data.dir=data/tiny", "checkpoint.interval=10", "--nodes", "2:4",
                                "--nproc-per-node", "2", "--image", "registry.example/cadre:0.1", "--cpu", "8",
                                "--memory", "32Gi", "--gpus", "1", "--efa", "1"]);
  const r = checkDeployment(d, { nnodes: "2:4", nproc: 2, claim: "tiny-a-data", claimWritten: true,
                                 limits: { cpu: "8", memory: "32Gi", "nvidia.com/gpu": "1", "vpc.amazonaws.com/efa": "1" } });
  const job = d.byKind.TrainJob[0];
  assert.equal(job.spec.trainer.numNodes, 4, "MAX pods: cadre's rendezvous runs with any 2..4 of them");
  assert.equal(job.spec.trainer.numProcPerNode, 2);
  assert.equal(r.config.data.dir, "data/tiny", "the ConfigMap holds the config with --set applied");
  assert.equal(r.config.checkpoint.interval, 10);
  // Trainer v2 reserves the PET_* variables for its torch plugin.
  assert.ok(!(job.spec.trainer.env ?? []).some((e) => e.name.startsWith("PET_")));
});

test("PyTorchJob with elasticPolicy on an existing claim in another namespace", () => {
  const d = deployed("tiny-b", ["--api", "pytorchjob", "--set", "data.dir=/mnt/fsx/data/tiny", "run.dir=runs/b",
                                "checkpoint.dir=/mnt/fsx/ckpt/b", "--nodes", "1:3", "--max-restarts", "5",
                                "--image", "registry.example/cadre:0.1", "--namespace", "training",
                                "--volume-claim", "fsx", "--mount-path", "/mnt/fsx"]);
  const r = checkDeployment(d, { nnodes: "1:3", nproc: 1, claim: "fsx", claimWritten: false });
  const job = d.byKind.PyTorchJob[0];
  const e = job.spec.elasticPolicy;
  assert.deepEqual([e.minReplicas, e.maxReplicas], [1, 3]);
  assert.equal(job.spec.pytorchReplicaSpecs.Worker.replicas, 3);
  assert.equal(e.maxRestarts, Number(flag(r.argv, "--max-restarts")));
  assert.equal(e.rdzvBackend, flag(r.argv, "--rdzv-backend"));
  assert.equal(e.rdzvId, r.rdzvId, "the operator's PET_RDZV_ID and the workers' --rdzv-id differ");
  assert.equal(job.spec.nprocPerNode, flag(r.argv, "--nproc-per-node"));
  // PET_RDZV_ENDPOINT (rdzvHost:rdzvPort) reaches the same etcd as the workers' endpoints.
  const viaPolicy = resolve(e.rdzvHost, e.rdzvPort, "training", d.objects);
  const [h, p] = flag(r.argv, "--rdzv-endpoint").split(",")[0].split(":");
  assert.equal(viaPolicy.statefulSet, resolve(h, Number(p), "training", d.objects).statefulSet);
  // The training operator's admission rules (webhook, not schema).
  assert.ok(!("Master" in job.spec.pytorchReplicaSpecs));
  assert.ok(job.spec.pytorchReplicaSpecs.Worker.template.spec.containers.every((c) => c.image));
  assert.ok(/^[a-z]([-a-z0-9]*[a-z0-9])?$/.test(job.metadata.name), "name must be a DNS-1035 label");
  for (const o of d.objects) assert.equal(o.metadata.namespace, "training", `${o.kind} ${o.metadata.name}`);
});

test("the rendezvous id is unique per deployment, also of the same config", () => {
  const args = ["--set", "data.dir=data/tiny", "--image", "registry.example/cadre:0.1"];
  // Two jobs, then the first one deployed again.
  const ids = ["tiny-c", "tiny-c2", "tiny-c"].map((name) => checkDeployment(
    deployed(name, args), { nnodes: "1", nproc: 1, claim: `${name}-data`, claimWritten: true }).rdzvId);
  assert.equal(new Set(ids).size, 3, `ids collide: ${ids}`);
});

test("the validators reject what the API server would (negative controls)", () => {
  const d = deployed("tiny-d", ["--set", "data.dir=data/tiny", "--image", "registry.example/cadre:0.1"]);
  const job = structuredClone(d.byKind.TrainJob[0]);
  job.spec.trainer.numNodes = "4";
  assert.match(validate(job).join(), /numNodes must be integer/);
  const runtime = structuredClone(d.byKind.TrainingRuntime[0]);
  runtime.spec.template.spec.replicatedJobs[0].template.spec.template.spec.containers[0].imagePullPolicy_ = "Always";
  assert.match(validate(runtime).join(), /must NOT have additional properties/);
  runtime.spec.mlPolicy.mpi = {};
  assert.match(validate(runtime).join(), /mlPolicy Only one of the policy can be configured/);  // a CEL rule
  const named = structuredClone(d.byKind.TrainJob[0]);
  named.metadata.name = "Tiny_D";
  assert.ok(validate(named).length > 0);
  const sts = structuredClone(d.byKind.StatefulSet[0]);
  sts.spec.replicas = "three";
  assert.ok(validate(sts).length > 0);
  sts.spec.template.spec.containers[0].ports.push({ name: "again", containerPort: 2379 });
  assert.ok(!checkPodTemplate(sts.spec.template), "a duplicate containerPort must be refused (list-map keys)");
  // And the semantic check notices an endpoint that resolves nowhere.
  assert.throws(() => resolve("tiny-d-etcd-3.tiny-d-etcd-peers.default.svc", 2379, "default", d.objects), /member/);
  assert.throws(() => resolve("etcd.default.svc", 2379, "default", d.objects), /does not resolve/);
});

test("bad input exits 2 naming the field", () => {
  const base = ["--config", tinyConfig, "--set", "data.dir=data/tiny", "--out", path.join(work, "bad")];
  const cases = [
    [["--image", "x", "--nodes", "3:2"], /deploy\.nodes \(--nodes\) 3:2: MIN \(3\) must not exceed MAX \(2\)/],
    [["--image", "x", "--set", "parallel.strategy=ZERO3"], /parallel\.strategy: unknown 'ZERO3'/],
    [[], /deploy\.image \(--image\) is required for Kubernetes/],
    [["--image", "x", "--set", "parallel.strategy=HYBRID_SHARD", "parallel.shard_group_size=4", "--nodes", "1:3",
      "--nproc-per-node", "2"], /--nodes\) 1:3 .* cannot run on\n  1 node\(s\) x 2 = 2 ranks: parallel\.shard_group_size 4/],
    [["--image", "x", "--set", "parallel.strategy=HYBRID_SHARD", "--nodes", "1:2"],
     /1 node: HYBRID_SHARD with parallel\.shard_group_size 0/],
    [["--image", "x", "--api", "mpijob"], /deploy\.api \(--api\): unknown 'mpijob'/],
    [["--image", "x", "--set", "deploy.gpu=1"], /unknown key 'deploy\.gpu'/],
    [["--image", "x", "--set", "data.dir=/data/tiny"], /data\.dir '\/data\/tiny' is not on the shared volume mounted at \/workspace/],
    [["--image", "x", "--name", "Tiny"], /deploy\.name \(--name\): 'Tiny' must be a DNS-1035 label/],
    [["--image", "x", "--memory", "32GB"], /deploy\.memory \(--memory\): '32GB' is not a Kubernetes quantity/],
    [["--image", "x", "--rdzv-id", "none"], /deploy\.rdzv_id \(--rdzv-id\): 'none'/],
    [["--image", "x", "--nproc-per-node", "two"], /deploy\.nproc_per_node \(--nproc-per-node\) expects an integer/],
    [["--image", "x", "--partition", "debug"], /unknown flag '--partition'/],
  ];
  for (const [args, message] of cases) {
    const r = deploy([...base, ...args]);
    assert.equal(r.status, 2, `${args.join(" ")}: exit ${r.status}\n${r.output}`);
    assert.match(r.output, message, args.join(" "));
  }
  assert.ok(!fs.existsSync(path.join(work, "bad")), "bad input must write nothing");
  const slurmCases = [
    [["--time", "2", "--signal-before", "120"],
     /deploy\.signal_before \(--signal-before\) \(120 s\) must be shorter than deploy\.time \(--time\) \(2 = 120 s\)/],
    [["--time", "2h"], /deploy\.time \(--time\): '2h' is not a Slurm time limit/],
    [["--memory", "1.5Gi"], /deploy\.memory \(--memory\): '1\.5Gi': Slurm takes a whole number/],
    [["--nodes", "0"], /deploy\.nodes \(--nodes\) \(N or MIN:MAX\) must be a positive integer/],
    [["--image", "x"], /unknown flag '--image'/],
  ];
  for (const [args, message] of slurmCases) {
    const r = spawnSync(cadre, ["deploy", "slurm", "--config", tinyConfig, "--set", "data.dir=data/tiny",
                                "--out", path.join(work, "bad"), ...args], { encoding: "utf8" });
    assert.equal(r.status, 2, `${args.join(" ")}: exit ${r.status}\n${r.stderr}`);
    assert.match(r.stderr, message, args.join(" "));
  }
  assert.ok(!fs.existsSync(path.join(work, "bad")), "bad input must write nothing");
});

test("--help", () => {
  for (const target of ["k8s", "slurm"]) {
    const r = spawnSync(cadre, ["deploy", target, "--help"], { encoding: "utf8" });
    assert.equal(r.status, 0);
    assert.match(r.stdout, /--nodes/);
    assert.match(r.stdout, target === "k8s" ? /--api/ : /--partition/);
  }
});
