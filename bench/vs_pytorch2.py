#!/usr/bin/env python3
"""Cadre against PyTorch 2.x on the same machine, one sitting: the training rows of issue #25.

Same model (the small Llama, configs/small.yaml), same shards, same batch and sequence, same
threads per rank, same dtype policy on both sides; the peer is bench/torch_peer.py under the
venv's PyTorch 2.x as a careful PyTorch engineer runs it (issue #55): SDPA attention,
AdamW(fused=True), jemalloc preloaded (Cadre has its own block cache), and for bf16 FSDP2's
MixedPrecisionPolicy (bf16 compute over float32 masters, float32 reduction: Cadre's policy),
even on one rank; torch.autocast, another policy, is a labelled reference row:

  single process, 2 threads, fp32                Cadre          vs torch eager (and torch.compile: --compile)
                                                  Cadre on the wheel's libtorch with its linears through
                                                  MKL too (CADRE_DNNL_LINEAR=0): one BLAS on both sides
  single process, 2 threads, bf16                Cadre          vs FSDP2 on one rank (reference: eager + autocast)
  2 ranks x 1 thread, bf16 params, fp32 reduce   FULL_SHARD     vs FSDP2 (Gloo), vs HSDP as DDP (Gloo)
                                                  NO_SHARD       vs HSDP as DDP (reference: DDP + autocast)
                                                  FULL_SHARD     vs Cadre NO_SHARD (communication hidden?)
  exposed communication, FULL_SHARD              the busiest rank's wait in collectives / step time
                                                  (rank_busy_s, rank_comm_wait_s of Cadre's metrics), and
                                                  rank 0's whole wait (comm_wait_s), which also holds its
                                                  waits for the other rank's compute
  peak RSS per rank (rank 0), activation         FULL_SHARD     vs FSDP2, both checkpointing every block
  checkpointing on both sides, 2 ranks

Throughput rows run each side --repeats times, alternating (Cadre, peer, Cadre, peer, ...), so
a busy spell on the machine hits both; a row gives each side's median and the median of the
per-repeat ratios. --build may be given twice (build/, what `make demo` makes, and a libtorch
2.x build): each repeat then runs both Cadre builds beside the same peer runs, one row each.

Usage: bench/vs_pytorch2.py [--build build [--build build-torch2-cpu]] [--python VENV/bin/python]
                            [--steps 10] [--repeats 3] [--compile] [--only single|ranks|memory|checkpoint ...]
Writes bench/results/vs_pytorch2.{json,md}. ~25 minutes on 2 cores; a quiet machine for figures.
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
from big_model_start import JEMALLOC, ensure_jemalloc  # noqa: E402
from train_throughput import MODEL, ensure_dataset, flops_per_token, peer_python, run  # noqa: E402

WARMUP = 2  # steps left out of every median, both sides


def cadre_rows(args, data, work, name, world, threads, sets, steps=None, cadre=None, env=None):
    """One `cadre train` (under `cadre run` for world > 1): its metrics rows and summary; `env`:
    variables added to the environment."""
    cadre = cadre or args.cadre
    run_dir = os.path.join(work, name)
    cmd = [cadre, "train", "--config", os.path.join(ROOT, "configs/small.yaml")]
    for s in [f"data.dir={data}", f"run.dir={run_dir}", f"train.steps={steps or args.steps}",
              "train.eval_interval=0", f"train.threads={threads}", "data.batch_size=8", "checkpoint.interval=0"] + sets:
        cmd += ["--set", s]
    if world > 1:
        cmd = [cadre, "run", "--nproc-per-node", str(world), "--log-dir", os.path.join(run_dir, "logs"),
               "--"] + cmd
    run(cmd, env=dict(os.environ, **(env or {})))
    rows = [json.loads(line) for line in open(os.path.join(run_dir, "metrics.jsonl"))]
    return rows, json.load(open(os.path.join(run_dir, "summary.json")))


def cadre_job(args, data, work, name, world, threads, sets, cadre=None, env=None):
    """Throughput, exposed communication, peak RSS and loss of one Cadre run (after warm-up)."""
    rows, summary = cadre_rows(args, data, work, name, world, threads, sets, cadre=cadre, env=env)
    rows = rows[WARMUP:]
    return dict(tokens_per_s=statistics.median(r["tokens_per_s"] for r in rows),
                exposed_comm=statistics.median(busiest_rank_wait(r) / r["step_time_s"] for r in rows),
                rank0_comm_wait=statistics.median(r["comm_wait_s"] / r["step_time_s"] for r in rows),
                peak_rss_bytes=summary["peak_rss_bytes"], final_loss=summary["final_loss"])


def busiest_rank_wait(row):
    """Communication no compute hid in one step: the time the rank that computed longest spent
    blocked in collectives, up to the loss all-reduce (forward, backward, gradient reductions).
    Another rank's wait also holds its wait for the busiest rank's compute (imbalance, not
    communication). A single process has no such figures: nan."""
    busy, wait = row.get("rank_busy_s"), row.get("rank_comm_wait_s")
    if not busy:
        return float("nan")
    return wait[max(range(len(busy)), key=busy.__getitem__)]


def peer_job(args, data, mode, threads, precision, extra=(), world=2):
    """The peer as a careful user runs it: fused AdamW, jemalloc preloaded."""
    cmd = [args.python, os.path.join(ROOT, "bench", "torch_peer.py"), "--data", data, "--model", json.dumps(MODEL),
           "--mode", mode, "--world", str(world), "--threads", str(threads), "--steps", str(args.steps),
           "--warmup", str(WARMUP), "--precision", precision, "--fused"] + list(extra)
    env = dict(os.environ, LD_PRELOAD=JEMALLOC) if args.jemalloc else None
    return json.loads(run(cmd, env=env).strip().splitlines()[-1])


def cadre_runs_by_build(args, data, work, name, world, threads, sets, runs):
    """One run of every Cadre build (--build), its tokens/s appended to runs[build]."""
    for k, cadre in enumerate(args.cadres):
        runs.setdefault(cadre, []).append(
            cadre_job(args, data, work, f"{name}-b{k}", world, threads, sets, cadre=cadre)["tokens_per_s"])


def build_rows(case, peer_name, by_build, peer_runs, goal):
    """One paired row per Cadre build, each against the same peer runs; the build named when several."""
    return [paired_row(case if len(by_build) == 1 else f"{case} [{build_name(cadre)}]", peer_name, runs, peer_runs, goal)
            for cadre, runs in by_build.items()]


def build_name(cadre):
    return os.path.basename(os.path.dirname(os.path.dirname(cadre)))


def paired_row(case, peer_name, cadre_runs, peer_runs, goal):
    """Each side's median tokens/s and the median of the per-repeat ratios (runs in time order)."""
    ratios = [c / p for c, p in zip(cadre_runs, peer_runs)]
    return dict(case=case, peer_name=peer_name, cadre=statistics.median(cadre_runs),
                peer=statistics.median(peer_runs), ratio=statistics.median(ratios), ratios=ratios,
                cadre_runs=cadre_runs, peer_runs=peer_runs, goal=goal)


def links_the_peers_torch(cadre):
    """Whether a build links the libtorch of the venv's wheel (whose float32 matmuls are MKL's), not
    Debian's 1.13 (OpenBLAS): read from its CMake cache."""
    cache = os.path.join(os.path.dirname(os.path.dirname(cadre)), "CMakeCache.txt")
    return os.path.exists(cache) and "site-packages/torch" in open(cache).read()


def single_process_rows(args, data, work):
    rows = []
    fp32, eager, comp = {}, [], []
    bf16, fsdp2_one, autocast = {}, [], []
    # Cadre's float32 linears call oneDNN's sgemm, the peer's the wheel's MKL: much of that row's
    # ratio is the library (bench/gemm_peak.py). PyTorch 2.11 has no setting that sends a float32
    # linear to oneDNN (its oneDNN matmul path takes bf16, fp16 and the bf16/tf32-rounded float32
    # modes only), so the same library on both sides is the other way round: a build on the wheel's
    # libtorch with CADRE_DNNL_LINEAR=0 runs its linears through libtorch's BLAS, the wheel's MKL.
    one_blas = {}
    same_blas = [c for c in args.cadres if links_the_peers_torch(c)]
    for rep in range(args.repeats):
        cadre_runs_by_build(args, data, work, f"single-float32-{rep}", 1, 2,
                            ["parallel.mixed_precision.param_dtype=float32"], fp32)
        for k, cadre in enumerate(same_blas):
            one_blas.setdefault(cadre, []).append(
                cadre_job(args, data, work, f"single-float32-mkl-{rep}-b{k}", 1, 2,
                          ["parallel.mixed_precision.param_dtype=float32"], cadre=cadre,
                          env={"CADRE_DNNL_LINEAR": "0"})["tokens_per_s"])
        eager.append(peer_job(args, data, "single", 2, "fp32")["tokens_per_s"])
        if args.compile:
            comp.append(peer_job(args, data, "single", 2, "fp32", ["--compile"])["tokens_per_s"])
        cadre_runs_by_build(args, data, work, f"single-bfloat16-{rep}", 1, 2,
                            ["parallel.mixed_precision.param_dtype=bfloat16"], bf16)
        fsdp2_one.append(peer_job(args, data, "fsdp2", 2, "bf16", world=1)["tokens_per_s"])
        autocast.append(peer_job(args, data, "single", 2, "bf16")["tokens_per_s"])
    case = "1 process x 2 threads"
    rows += build_rows(f"{case}, float32", "PyTorch eager", fp32, eager, 1.2)
    rows += [paired_row(f"{case}, float32 (reference: MKL on both sides, CADRE_DNNL_LINEAR=0) [{build_name(c)}]",
                        "PyTorch eager", one_blas[c], eager, None) for c in same_blas]
    if args.compile:
        rows += build_rows(f"{case}, float32 (reference)", "torch.compile", fp32, comp, None)
    rows += build_rows(f"{case}, bfloat16", "FSDP2 MixedPrecisionPolicy, 1 rank", bf16, fsdp2_one, 1.2)
    rows += build_rows(f"{case}, bfloat16 (reference: another dtype policy)", "eager + autocast", bf16, autocast, None)
    return rows


def two_rank_rows(args, data, work):
    bf16 = ["parallel.mixed_precision.param_dtype=bfloat16", "parallel.mixed_precision.reduce_dtype=float32"]
    full, none = {}, {}
    runs = {"fsdp2": [], "hsdp": [], "ddp": []}
    exposed = {"busiest": [], "rank0": []}
    for rep in range(args.repeats):
        for k, cadre in enumerate(args.cadres):
            job = cadre_job(args, data, work, f"full-{rep}-b{k}", 2, 1, bf16 + ["parallel.strategy=FULL_SHARD"],
                            cadre=cadre)
            full.setdefault(cadre, []).append(job["tokens_per_s"])
            if k == 0:  # the headline build's
                exposed["busiest"].append(job["exposed_comm"])
                exposed["rank0"].append(job["rank0_comm_wait"])
        runs["fsdp2"].append(peer_job(args, data, "fsdp2", 1, "bf16")["tokens_per_s"])
        cadre_runs_by_build(args, data, work, f"noshard-{rep}", 2, 1, bf16 + ["parallel.strategy=NO_SHARD"], none)
        runs["hsdp"].append(peer_job(args, data, "hsdp", 1, "bf16")["tokens_per_s"])
        runs["ddp"].append(peer_job(args, data, "ddp", 1, "bf16")["tokens_per_s"])
    case = "2 ranks x 1 thread, bf16"
    rows = (build_rows(f"{case}, FULL_SHARD", "FSDP2 (Gloo)", full, runs["fsdp2"], 1.5)
            + build_rows(f"{case}, FULL_SHARD", "HSDP as DDP (Gloo)", full, runs["hsdp"], 1.2)
            + build_rows(f"{case}, NO_SHARD", "HSDP as DDP (Gloo)", none, runs["hsdp"], 1.1)
            + build_rows(f"{case}, NO_SHARD (reference: another dtype policy)", "DDP + autocast (Gloo)", none,
                         runs["ddp"], None))
    headline = args.cadres[0]
    rows.append(paired_row(f"{case}, FULL_SHARD [{build_name(headline)}]" if len(args.cadres) > 1
                           else f"{case}, FULL_SHARD", "Cadre NO_SHARD", full[headline], none[headline], 0.97))
    return rows, exposed


def memory_rows(args, data, work):
    """Peak RSS of rank 0: whole-process, and above the process's baseline (libraries loaded and the
    process group up, before the model: Cadre's `rss_before_model_bytes` log line, the peer's
    baseline_rss_bytes), which leaves out what importing each side's libraries costs."""
    sets = ["parallel.mixed_precision.param_dtype=bfloat16", "parallel.strategy=FULL_SHARD",
            "parallel.activation_checkpointing=true"]
    cadre = cadre_job(args, data, work, "mem-full-ac", 2, 1, sets)
    cadre_base = rss_before_model(os.path.join(work, "mem-full-ac"))
    peer = peer_job(args, data, "fsdp2", 1, "bf16", ["--ac"])
    case = "2 ranks, FULL_SHARD + activation checkpointing, bf16"
    return [dict(case=f"peak RSS above the baseline (MiB), {case}", cadre=(cadre["peak_rss_bytes"] - cadre_base) / 2**20,
                 peer_name="FSDP2 + checkpointing", peer=(peer["peak_rss_bytes"] - peer["baseline_rss_bytes"]) / 2**20,
                 goal=0.8, lower_is_better=True),
            dict(case=f"peak RSS, whole process (MiB), {case}", cadre=cadre["peak_rss_bytes"] / 2**20,
                 peer_name="FSDP2 + checkpointing", peer=peer["peak_rss_bytes"] / 2**20, goal=None)]


def rss_before_model(run_dir):
    """Rank 0's RSS before its model was built, from its log (`memory: rank 0 ... rss_before_model_bytes=N`)."""
    rank0 = os.path.join(run_dir, "logs", "round_0", "rank_0")
    for name in ("stderr.log", "stdout.log"):
        path = os.path.join(rank0, name)
        found = re.search(r"memory: rank 0 .*rss_before_model_bytes=(\d+)", open(path).read()) \
            if os.path.exists(path) else None
        if found:
            return int(found.group(1))
    raise SystemExit(f"vs_pytorch2: no rss_before_model_bytes line in {rank0}")


def checkpoint_rows(args, data, work, interval=4, saves=3):
    """Asynchronous saves every `interval` steps: the step each save follows (staging copy) and
    the one after (background write) against the median of the steps no save touches."""
    sets = ["parallel.mixed_precision.param_dtype=bfloat16", "parallel.strategy=FULL_SHARD",
            f"checkpoint.interval={interval}", "checkpoint.async=true"]
    rows, summary = cadre_rows(args, data, work, "ckpt", 2, 1, sets, steps=interval * saves + 2)
    step_time = {r["step"]: r["step_time_s"] for r in rows}
    saved_after = [interval * (k + 1) for k in range(saves)]
    touched = set(saved_after) | {s + 1 for s in saved_after}
    clean = statistics.median(t for s, t in step_time.items() if s > WARMUP and s not in touched)
    staging = statistics.median(step_time[s] for s in saved_after)
    writing = statistics.median(step_time[s + 1] for s in saved_after)
    rss = {r["step"]: r["rss_bytes"] for r in rows}
    # At the end, once every save is written (the writer runs on idle CPU time, so the last
    # save may still be in flight at the last step).
    kept = summary["rss_bytes"] - rss[saved_after[0] - 1]
    return [dict(case="async checkpoint: step with the staging copy, s", cadre=staging, peer_name="step without a save",
                 peer=clean, goal=1.05, lower_is_better=True, digits=3),
            dict(case="async checkpoint: step beside the background write, s", cadre=writing,
                 peer_name="step without a save", peer=clean, goal=1.05, lower_is_better=True, digits=3),
            dict(case=f"RSS after {saves} saves (at the end, all written) minus before the first (MiB)",
                 cadre=kept / 2**20,
                 peer_name="-", peer=float("nan"), goal=None)]


def doctor_peaks(cadre):
    """fp32 and bf16 matmul GFLOP/s on every core (1024^3), as `cadre doctor` measures them on this
    machine: the MFU denominators."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
               MASTER_PORT=str(port))
    print(f"+ {cadre} doctor --json", file=sys.stderr, flush=True)
    proc = subprocess.run([cadre, "doctor", "--json"], env=env, stdout=subprocess.PIPE, text=True)
    out = proc.stdout  # exit 1 when a check is under its floor: the figures are still the machine's
    checks = {c["name"]: c["value"] for c in json.loads(out[out.index("{"):])["checks"]}
    return {"fp32": checks["fp32_matmul"], "bf16": checks["bf16_matmul"]}


def mfu_text(row, side, args):
    """Model FLOPs utilisation of a throughput row's side: tokens/s x FLOPs/token over the doctor's
    matmul peak of the row's dtype ("-" for rows that are not throughput)."""
    if "ratios" not in row or not args.peaks:
        return "-"
    peak = args.peaks["fp32" if "float32" in row["case"] else "bf16"] * 1e9
    return f"{100 * row[side] * args.flops_per_token / peak:.0f}%"


def ratio_of(row):
    return row.get("ratio", row["cadre"] / row["peer"])


def goal_text(row):
    if row["goal"] is None:
        return "-"
    ratio = ratio_of(row)
    met = ratio <= row["goal"] if row.get("lower_is_better") else ratio >= row["goal"]
    return f"{'<=' if row.get('lower_is_better') else '>='} {row['goal']}x: {'met' if met else 'not met'}"


def table(rows, exposed, args):
    lines = [f"Llama 35.7M, batch 8 x 256 per rank, {args.steps} steps (median after {WARMUP}), "
             f"{args.repeats} alternating repeats per throughput row (Cadre/peer: median of the per-repeat "
             f"ratios, each repeat's in brackets); Cadre {', '.join(args.cadres)}; peer {args.python} "
             f"(torch {args.torch}; AdamW fused; jemalloc {'preloaded' if args.jemalloc else 'missing'}); "
             f"load average {min(args.loads):.1f}-{max(args.loads):.1f}; MFU: tokens/s x {args.flops_per_token / 1e6:.0f}M "
             f"FLOPs/token (6 x matmul parameters + attention) over `cadre doctor`'s matmul peak of the row's dtype "
             f"(1024^3, 2 threads: fp32 {args.peaks['fp32']:.0f}, bf16 {args.peaks['bf16']:.0f} GFLOP/s)", "",
             "| case | Cadre | peer | peer figure | Cadre/peer | goal | Cadre MFU | peer MFU |",
             "|---|---:|---|---:|---:|---|---:|---:|"]
    for r in rows:
        d = r.get("digits", 0)
        ratio = "-" if r["peer"] != r["peer"] else f"{ratio_of(r):.2f}x"
        if "ratios" in r:
            ratio += " (" + ", ".join(f"{x:.2f}" for x in r["ratios"]) + ")"
        lines.append(f"| {r['case']} | {r['cadre']:.{d}f} | {r['peer_name']} | {r['peer']:.{d}f} | "
                     f"{ratio} | {goal_text(r)} | {mfu_text(r, 'cadre', args)} | {mfu_text(r, 'peer', args)} |")
    if exposed:
        lines += ["", exposed_text(exposed)]
    return "\n".join(lines)


def exposed_text(exposed):
    def pct(values):
        return f"{100 * statistics.median(values):.1f}% (" + ", ".join(f"{100 * v:.1f}" for v in values) + ")"
    met = "met" if statistics.median(exposed["busiest"]) < 0.03 else "not met"
    return (f"Exposed communication, FULL_SHARD 2 ranks, median step of each repeat: the busiest rank's wait "
            f"in collectives {pct(exposed['busiest'])} of the step (goal < 3%: {met}); rank 0's whole wait, "
            f"which also holds its waits for the other rank's compute, {pct(exposed['rank0'])}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", action="append",
                    help="a Cadre build (default build/); twice: both builds side by side, the first the headline")
    ap.add_argument("--python", default=peer_python())
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3, help="alternating runs of each side per throughput row")
    ap.add_argument("--compile", action="store_true", help="also time torch.compile on one process")
    ap.add_argument("--only", choices=["single", "ranks", "memory", "checkpoint"], action="append",
                    help="run only these cases (repeatable)")
    args = ap.parse_args()
    if args.steps <= WARMUP:
        ap.error(f"--steps must exceed the {WARMUP} warm-up steps")
    args.cadres = [os.path.join(os.path.abspath(b), "bin", "cadre") for b in (args.build or [os.path.join(ROOT, "build")])]
    args.cadre = args.cadres[0]
    args.jemalloc = ensure_jemalloc()
    args.peaks = doctor_peaks(args.cadre)
    args.flops_per_token = flops_per_token(MODEL, 256)[0]
    args.torch = run([args.python, "-c", "import torch; print(torch.__version__)"]).strip()
    only = set(args.only or ["single", "ranks", "memory", "checkpoint"])
    data = ensure_dataset(args.cadre)
    args.loads = [os.getloadavg()[0]]
    rows, exposed = [], {}
    with tempfile.TemporaryDirectory() as work:
        if "single" in only:
            rows += single_process_rows(args, data, work)
            args.loads.append(os.getloadavg()[0])
        if "ranks" in only:
            ranks, exposed = two_rank_rows(args, data, work)
            rows += ranks
            args.loads.append(os.getloadavg()[0])
        if "memory" in only:
            rows += memory_rows(args, data, work)
        if "checkpoint" in only:
            rows += checkpoint_rows(args, data, work)
        args.loads.append(os.getloadavg()[0])
    text = table(rows, exposed, args)
    print(text)
    out_dir = os.path.join(ROOT, "bench", "results")
    os.makedirs(out_dir, exist_ok=True)
    json.dump(dict(rows=rows, exposed_comm=exposed, cadre=args.cadres, torch=args.torch, load_averages=args.loads,
                   jemalloc=args.jemalloc, matmul_peak_gflops=args.peaks, flops_per_token=args.flops_per_token),
              open(os.path.join(out_dir, "vs_pytorch2.json"), "w"), indent=2)
    open(os.path.join(out_dir, "vs_pytorch2.md"), "w").write(text + "\n")


if __name__ == "__main__":
    main()
