#!/usr/bin/env python3
"""Losing one of three data-parallel replicas: Cadre's in-memory recovery against torchft, side by
side on the same model, shapes and machine (issue #26).

Both sides train the same Llama (python/llama_ref.py for torchft, Cadre's own) on the SOTU shards,
3 replicas of one process each, 1 thread each, AdamW, and lose the third replica with SIGKILL
once the survivors have done --fault-after steps:
  Cadre    3 `cadre run` agents on loopback (the rendezvous store in the first), `--recovery
           memory`, parallel.strategy NO_SHARD, a global batch of 6 micro-batches of --batch
           samples (2 per rank; 3 per rank once 2 are left: the global batch is kept). The fault
           kills the third agent's whole process group: agent and worker, as a node losing power.
  torchft  torchft 0.2.0 from PyPI: its lighthouse (`torchft_lighthouse`, the settings of its
           README: --min_replicas 1 --quorum_tick_ms 100 --join_timeout_ms 10000) and 3 replica
           groups as its train_ddp.py builds them (Manager with min_replica_size 1, its
           DistributedDataParallel and Optimizer wrappers over AdamW, ProcessGroupGloo with a 5 s
           timeout, Manager timeout 30 s), each with 2 x --batch samples a step. torchft keeps no
           global batch: the survivors go on with 2/3 of it. Two ways to reduce gradients: its
           DDP wrapper ("torchft DDP"), and `manager.allreduce` per gradient after backward
           ("torchft allreduce"), the pattern its FSDP integrations use. In this sitting's runs the
           DDP wrapper's comm hook failed an assertion on the survivors after the kill (a bucket
           reduced after the first error gets a dummy future): recorded as a run that did not
           recover.
Measured per side (median over --repeats runs):
  recovery_s   from the kill to the first step the survivors complete after it
  steps_lost   the last step completed before the kill minus the step the survivors went on from
  overhead     step time with fault tolerance on and nothing failing, over the same training
               without it, minus 1: Cadre --recovery memory over --recovery restart (wall-clock time
               per step after --warmup steps, read from metrics.jsonl as it grows); torchft's
               Manager + DDP over torch DDP (bench/torch_peer.py --mode ddp), 3 ranks each
With --cadre-strategy FULL_SHARD (or SHARD_GRAD_OP, ZERO1) Cadre's side shards the state fully:
each rank copies its part to a peer's memory every --memory-interval steps, and the survivors go
back to the newest copied step (steps_lost up to the interval). torchft has no counterpart (its
replica groups each hold the whole state), so --cadre-only runs Cadre's cases alone.
Prints the table, torchft's figure, Cadre's and their ratio; writes bench/results/recovery.{md,json}
(recovery-<strategy>.{md,json} for another strategy).
Needs a Cadre build (--cadre) and the project venv with torchft (scripts/setup.sh --torch).
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "bench"))
from train_throughput import ensure_dataset, peer_python  # noqa: E402

MODEL = dict(dim=256, n_layers=4, n_heads=8, n_kv_heads=8, vocab_size=8192, multiple_of=256, ffn_dim=0,
             max_seq_len=256, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False)
REPLICAS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(cond, timeout_s, what):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(0.01)
    raise RuntimeError(f"timed out after {timeout_s} s waiting for {what}")


class StepLog:
    """Steps completed, as (step, time seen), from a JSON-lines file another process appends. A group
    that goes back to an older step (sharded in-memory recovery) cuts the file back: it is then read
    again from the start, the steps in it seen anew."""

    def __init__(self, path):
        self.path, self.offset, self.partial, self.steps = path, 0, "", []

    def poll(self):
        try:
            with open(self.path) as f:
                if os.fstat(f.fileno()).st_size < self.offset:  # cut back
                    self.offset, self.partial = 0, ""
                f.seek(self.offset)
                chunk = f.read()
                self.offset = f.tell()
        except FileNotFoundError:
            return self.steps
        now = time.monotonic()
        lines = (self.partial + chunk).split("\n")
        self.partial = lines.pop()
        for line in lines:
            if line.strip():
                self.steps.append((json.loads(line)["step"], now))
        return self.steps

    def last_step(self):
        self.poll()
        return self.steps[-1][0] if self.steps else 0


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


# --- Cadre -------------------------------------------------------------------------------------

def cadre_train_args(args, run_dir, data):
    sets = [f"model.{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in MODEL.items()]
    sets += [f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={args.steps}", "train.eval_interval=0",
             "train.threads=1", f"data.batch_size={args.batch}", "optim.grad_accum_steps=2",
             f"parallel.strategy={args.cadre_strategy}", "checkpoint.interval=0",
             f"checkpoint.memory_interval={args.memory_interval}"]
    cmd = [args.cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml")]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def cadre_job(args, data, work, recovery, fault):
    """One 3-agent job; with `fault`, the third agent's group is killed after --fault-after steps."""
    run_dir = os.path.join(work, "run")
    port = free_port()
    env = dict(os.environ, OMP_NUM_THREADS="1", CADRE_JOB_SECRET="bench-recovery-secret-0123456789")
    agents, outputs = [], []
    for a in range(REPLICAS):
        out = open(os.path.join(work, f"agent{a}.log"), "w")
        cmd = [args.cadre, "run", "--nnodes", f"2:{REPLICAS}", "--nproc-per-node", "1", "--rdzv-backend", "c10d",
               "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bench", "--recovery", recovery,
               "--log-dir", os.path.join(work, f"logs{a}"), "--"] + cadre_train_args(args, run_dir, data)
        agents.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
        outputs.append(out.name)
        if a == 0:  # the first agent hosts the store: the fault never hits it
            wait_until(lambda: "hosting the store" in open(outputs[0]).read(), 60, "the first agent's store")
    log = StepLog(os.path.join(run_dir, "metrics.jsonl"))
    result = {}
    try:
        if fault:
            wait_until(lambda: log.last_step() >= args.fault_after, 300, f"step {args.fault_after}")
            before = log.last_step()
            t_kill = time.monotonic()
            kill_group(agents[2])
            # The re-formed group's first step: after the step it went on from (in rank 0's log).
            text = lambda: "".join(open(o).read() for o in outputs[:2])
            pattern = re.compile(r"recovery: \d+ rank\(s\) go on from step (\d+) in memory")
            start = int(wait_until(lambda: pattern.search(text()), 300, "the in-memory recovery").group(1))
            seen = wait_until(lambda: [t for s, t in log.poll() if s > start and t > t_kill], 300,
                              "a step after the recovery")
            result = dict(recovery_s=seen[0] - t_kill, steps_lost=max(0, before - start))
        if not fault:  # wall-clock time per step after the warm-up: copies and saves included
            deadline = time.monotonic() + 1800
            while any(a.poll() is None for a in agents) and time.monotonic() < deadline:
                log.poll()
                time.sleep(0.01)
            seen = {step: t for step, t in log.poll()}
            last = max(seen)
            if last > args.warmup:
                result["wall_step_s"] = (seen[last] - seen[args.warmup]) / (last - args.warmup)
        for a in agents[:2] if fault else agents:
            if a.wait(timeout=1800) != 0:
                raise RuntimeError(f"a Cadre agent failed: see {work}")
        copies = [r["peer_copy_s"] for r in map(json.loads, open(os.path.join(run_dir, "metrics.jsonl")))
                  if "peer_copy_s" in r]
        if copies:  # sharded state: the training thread's share of each copy (packing it)
            result["peer_copy_s"] = statistics.median(copies)
        summary = json.load(open(os.path.join(run_dir, "summary.json")))
        result["tokens_per_s"] = summary["tokens_per_s"]
        return result
    finally:
        for a in agents:
            if a.poll() is None:
                kill_group(a)


# --- torchft -----------------------------------------------------------------------------------

def torchft_worker(args):
    """One replica group (one process), as torchft's train_ddp.py: run by this script itself."""
    from datetime import timedelta

    import numpy as np
    import torch
    import torch.distributed as dist
    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
    sys.path.insert(0, os.path.join(ROOT, "python"))
    from llama_ref import Llama, loss_fn, make_adamw
    sys.path.insert(0, os.path.join(ROOT, "bench"))
    from torch_peer import load_samples

    rid = int(os.environ["REPLICA_GROUP_ID"])
    torch.set_num_threads(1)
    torch.manual_seed(1234)
    samples, _ = load_samples(args.data)
    store = dist.TCPStore("127.0.0.1", int(os.environ["STORE_PORT"]), 1, True)  # this replica group's
    model = Llama(dict(MODEL, attention="sdpa"))
    optim = make_adamw(model, 1e-3, (0.9, 0.95), 1e-8, 0.1)

    def state_dict():
        return {"model": model.state_dict(), "optim": optim.state_dict()}

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        optim.load_state_dict(sd["optim"])

    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=5)), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict, replica_id=f"bench_{rid}",
                      store_addr="127.0.0.1", store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=os.environ["TORCHFT_LIGHTHOUSE"], timeout=timedelta(seconds=30))
    ddp = DistributedDataParallel(manager, model) if args.torchft_grads == "ddp" else model
    opt = Optimizer(manager, optim)
    gen = np.random.default_rng(1234 + rid)
    with open(os.environ["STEP_LOG"], "a") as out:
        while manager.current_step() < args.steps:
            batch = torch.from_numpy(samples[gen.integers(0, len(samples), 2 * args.batch)].astype(np.int64))
            opt.zero_grad()
            loss = loss_fn(ddp(batch[:, :-1]), batch[:, 1:])
            loss.backward()
            if args.torchft_grads == "allreduce":
                for work in [manager.allreduce(p.grad) for p in model.parameters()]:
                    work.wait()
            opt.step()  # commits only if every participant's all-reduce succeeded
            out.write(json.dumps({"step": manager.current_step(), "loss": loss.item(), "t": time.time(),
                                  "participants": manager.num_participants()}) + "\n")
            out.flush()
    manager.shutdown(wait=False)


def torchft_job(args, data, work, fault, grads="ddp"):
    """The lighthouse and 3 replica groups; with `fault`, the third is killed after --fault-after steps."""
    port = free_port()
    lighthouse = subprocess.Popen([os.path.join(os.path.dirname(args.python), "torchft_lighthouse"), "--min_replicas",
                                   "1", "--quorum_tick_ms", "100", "--join_timeout_ms", "10000", "--bind",
                                   f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
    groups, logs = [], []
    try:
        for r in range(REPLICAS):
            step_log = os.path.join(work, f"torchft{r}.jsonl")
            env = dict(os.environ, REPLICA_GROUP_ID=str(r), STORE_PORT=str(free_port()), OMP_NUM_THREADS="1",
                       TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}", STEP_LOG=step_log)
            cmd = [args.python, os.path.abspath(__file__), "--torchft-worker", "--data", data, "--steps",
                   str(args.steps), "--batch", str(args.batch), "--torchft-grads", grads]
            out = open(os.path.join(work, f"torchft{r}.log"), "w")
            groups.append(subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True))
            logs.append(StepLog(step_log))
        result = {}
        if fault:
            wait_until(lambda: min(l.last_step() for l in logs[:2]) >= args.fault_after, 300, f"step {args.fault_after}")
            before = max(l.last_step() for l in logs[:2])
            t_kill = time.monotonic()
            kill_group(groups[2])
            after = lambda: [t for s, t in logs[0].poll() if s > before]
            wait_until(lambda: after() or any(g.poll() is not None for g in groups[:2]), 300, "a step after the kill")
            if not after():  # a survivor died instead: recorded, not hidden
                return dict(failed=last_error_line(os.path.join(work, f"torchft{r}.log") for r in range(2)))
            result = dict(recovery_s=after()[0] - t_kill, steps_lost=0)  # survivors keep their step (no rollback)
        for g in groups[:2] if fault else groups:
            if g.wait(timeout=1800) != 0:
                raise RuntimeError(f"a torchft replica group failed: see {work}")
        with open(logs[0].path) as f:
            times = [json.loads(line)["t"] for line in f if line.strip()]  # the worker's own clock
        gaps = [b - a for a, b in zip(times, times[1:])][args.warmup:]
        result["step_s"] = statistics.median(gaps)
        return result
    finally:
        for p in groups + [lighthouse]:
            if p.poll() is None:
                kill_group(p)


def last_error_line(paths):
    """The last line naming an error in these logs (a survivor's traceback ends with it)."""
    last = "exited without an error line"
    for path in paths:
        for line in open(path, errors="replace"):
            if "Error" in line or "error" in line:
                last = f"{os.path.basename(path)}: {line.strip()[:200]}"
    return last


def torch_ddp_step_s(args, data):
    """Plain torch DDP, 3 ranks: the same model, 2 x --batch samples a rank, no fault tolerance."""
    cmd = [args.python, os.path.join(ROOT, "bench", "torch_peer.py"), "--mode", "ddp", "--world", str(REPLICAS),
           "--threads", "1", "--data", data, "--model", json.dumps(MODEL), "--batch", str(2 * args.batch),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--attention", "sdpa"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout
    rate = json.loads(out.strip().splitlines()[-1])["tokens_per_s"]
    return REPLICAS * 2 * args.batch * MODEL["max_seq_len"] / rate


# --- the sitting -------------------------------------------------------------------------------

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cadre", default=os.path.join(ROOT, "build", "bin", "cadre"))
    p.add_argument("--python", default=peer_python())
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--fault-after", type=int, default=20)
    p.add_argument("--batch", type=int, default=2, help="samples per micro-batch (Cadre) / half a step (torchft)")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=os.path.join(ROOT, "bench", "results"))
    p.add_argument("--data")
    p.add_argument("--cadre-strategy", default="NO_SHARD", help="Cadre's parallel.strategy")
    p.add_argument("--memory-interval", type=int, default=10, help="checkpoint.memory_interval (sharded state)")
    p.add_argument("--cadre-only", action="store_true", help="skip torchft and torch DDP")
    p.add_argument("--torchft-worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--torchft-grads", choices=["ddp", "allreduce"], default="ddp", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.torchft_worker:
        return torchft_worker(args)
    if not os.path.exists(args.cadre):
        sys.exit(f"recovery.py: no Cadre binary at {args.cadre} (build it, or pass --cadre)")
    if not args.cadre_only and not os.path.exists(os.path.join(os.path.dirname(args.python), "torchft_lighthouse")):
        sys.exit(f"recovery.py: no torchft next to {args.python} (scripts/setup.sh --torch installs it)")
    data = args.data or ensure_dataset(args.cadre)
    jobs = [("cadre", "fault"), ("torchft", "fault"), ("torchft-allreduce", "fault"), ("cadre", "memory"),
            ("cadre", "restart"), ("torchft", "clean"), ("torchft-allreduce", "clean"), ("ddp", "clean")]
    if args.cadre_only:
        jobs = [j for j in jobs if j[0] == "cadre"]
    runs = {j: [] for j in jobs}
    total, done, t0 = len(jobs) * args.repeats, 0, time.monotonic()
    for rep in range(args.repeats):
        for side, kind in jobs:
            work = tempfile.mkdtemp(prefix=f"cadre-recovery-{side}-{kind}-")
            try:
                if side == "cadre":
                    r = cadre_job(args, data, work, "memory" if kind != "restart" else "restart", kind == "fault")
                elif side.startswith("torchft"):
                    r = torchft_job(args, data, work, kind == "fault", "allreduce" if side.endswith("allreduce") else "ddp")
                else:
                    r = {"step_s": torch_ddp_step_s(args, data)}
            except Exception as e:
                sys.exit(f"recovery.py: {side} {kind} failed ({e}); its logs are in {work}")
            shutil.rmtree(work)
            runs[(side, kind)].append(r)
            done += 1
            rate = done / (time.monotonic() - t0)
            print(f"recovery: {done}/{total} runs ({side} {kind}: {r}); {rate * 60:.1f} runs/min, ETA "
                  f"{(total - done) / rate:.0f} s", file=sys.stderr, flush=True)
    def med(side, kind, key):
        values = [r[key] for r in runs.get((side, kind), []) if key in r]
        return statistics.median(values) if values else float("nan")
    survived = {side: sum("failed" not in r for r in runs.get((side, "fault"), []))
                for side in ("cadre", "torchft", "torchft-allreduce")}
    tokens_per_step = REPLICAS * 2 * args.batch * MODEL["max_seq_len"]
    cadre_step = med("cadre", "memory", "wall_step_s")
    overhead = {"cadre": med("cadre", "memory", "wall_step_s") / med("cadre", "restart", "wall_step_s") - 1,
                "torchft": med("torchft", "clean", "step_s") / med("ddp", "clean", "step_s") - 1,
                "torchft-allreduce": med("torchft-allreduce", "clean", "step_s") / med("ddp", "clean", "step_s") - 1}
    lines = [f"Lose 1 of {REPLICAS} replicas (SIGKILL) after step {args.fault_after}; medians over the runs that "
             f"recovered ({args.repeats} runs a case); {tokens_per_step} tokens a step; {os.cpu_count()} cores; "
             f"Cadre {args.cadre_strategy}" + (f", checkpoint.memory_interval {args.memory_interval}"
                                               if args.cadre_strategy != "NO_SHARD" else ""),
             "", "| case | torchft 0.2.0, DDP wrapper | torchft 0.2.0, manager.allreduce | Cadre --recovery memory | "
             "torchft allreduce / Cadre |", "|---|---:|---:|---:|---:|"]
    sides = ("torchft", "torchft-allreduce", "cadre")
    if args.cadre_only:
        lines[-2:] = ["| case | Cadre --recovery memory | |", "|---|---:|---:|"]
        sides = ("cadre",)
    lines.append("| runs whose survivors trained on | " + " | ".join(f"{survived[s]} of {args.repeats}" for s in sides)
                 + " | |")
    recovery = [med(s, "fault", "recovery_s") for s in sides]
    ratio = f"{recovery[1] / recovery[2]:.1f}x" if len(recovery) == 3 and recovery[2] > 0 else "-"
    lines.append("| kill -> next completed step (s) | " + " | ".join(f"{v:.2f}" for v in recovery) + f" | {ratio} |")
    lines.append("| steps lost | " + " | ".join(f"{med(s, 'fault', 'steps_lost'):.0f}" for s in sides) + " | |")
    lines.append("| fault-tolerance overhead, no fault (step time) | " +
                 " | ".join(f"{100 * overhead[s]:+.1f}%" for s in sides) + " | |")
    lines.append("")
    for side in sides:
        for r in runs.get((side, "fault"), []):
            if "failed" in r:
                lines.append(f"{side} run that did not recover: {r['failed']}")
    lines.append(f"Step time without a fault: Cadre {cadre_step:.3f} s (--recovery memory), "
                 f"{med('cadre', 'restart', 'wall_step_s'):.3f} s (restart), wall clock after the warm-up; torchft "
                 f"{med('torchft', 'clean', 'step_s'):.3f} s (DDP wrapper), {med('torchft-allreduce', 'clean', 'step_s'):.3f} s "
                 f"(allreduce), torch DDP {med('ddp', 'clean', 'step_s'):.3f} s. Overheads: Cadre memory over restart; "
                 "torchft over torch DDP.")
    if runs.get(("cadre", "memory")) and "peer_copy_s" in runs[("cadre", "memory")][0]:
        lines.append(f"Each in-memory copy (every {args.memory_interval} steps) held the training thread "
                     f"{1000 * med('cadre', 'memory', 'peer_copy_s'):.1f} ms (median): packing the rank's part; "
                     "the exchange runs in the background.")
    text = "\n".join(lines)
    print(text)
    os.makedirs(args.out, exist_ok=True)
    name = "recovery" if args.cadre_strategy == "NO_SHARD" else f"recovery-{args.cadre_strategy.lower()}"
    with open(os.path.join(args.out, name + ".md"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(args.out, name + ".json"), "w") as f:
        json.dump({f"{s}/{k}": v for (s, k), v in runs.items()}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
