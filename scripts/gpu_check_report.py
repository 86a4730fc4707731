#!/usr/bin/env python3
"""The GPU check's arithmetic and table (scripts/gpu_check.sh runs it; standard library only, so
that it runs under any python with or without the project venv).

  gpu_check_report.py peer-model RUN/config.yaml     the model section as the PyTorch peer's JSON
  gpu_check_report.py table --out DIR --device D --models "a b" --tiny 0|1
      prints the markdown table from whatever runs exist so far (a part not yet run is said to be);
      exit 1 when loss parity or a checkpoint round trip that ran fails.

The launcher runs (runs/fsdp_*: FULL_SHARD under `cadre run` on the device, and on the CPU at
another world size and strategy with the same global batch) are compared as the single-process
ones are: a run resumed at step 10 on the other side against the run it continues, and the two
sides from scratch against each other. Each run's summary.json says its world size and strategy.

Parity tolerances (float32 compute, the same initial weights and batches on both devices): the
first step's loss is computed before any update, so CPU and GPU differ only by summation order
(relative 1e-6 per reduction; 1e-4 allowed). Later steps carry AdamW's amplification of those
differences through up to 20 updates: 5e-3 relative, well below what a wrong mask, a missed
gradient reduction or a stale shard does to a loss (those move it by whole percents at once).
"""
import argparse
import json
import os
import sys

FIRST_STEP_TOL = 1e-4
STEP_TOL = 5e-3


def read_yaml_sections(path):
    """config.yaml as Cadre writes it (yaml-cpp, block style): {"model": {"dim": "64", ...}}."""
    sections, current = {}, None
    for line in open(path):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        indent = len(line) - len(line.lstrip())
        key, _, value = line.strip().partition(":")
        value = value.strip().strip("'\"")
        if indent == 0:
            current = sections.setdefault(key, {})
        elif indent == 2 and current is not None and value:
            current[key] = value
    return sections


def scalar(text):
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def peer_model(config_path):
    model = {k: scalar(v) for k, v in read_yaml_sections(config_path)["model"].items() if k != "arch"}
    return json.dumps(model)


def losses(run_dir):
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    out = {}
    for line in open(path):
        record = json.loads(line)
        out[record["step"]] = record["loss"]
    return out


def compare(name, got, want, steps):
    """Largest relative loss difference over `steps`; failures name the step."""
    problems, worst = [], 0.0
    for s in steps:
        if s not in got or s not in want:
            problems.append(f"{name}: step {s} missing")
            continue
        rel = abs(got[s] - want[s]) / abs(want[s])
        worst = max(worst, rel)
        tol = FIRST_STEP_TOL if s == 1 else STEP_TOL
        if rel > tol:
            problems.append(f"{name}: step {s} loss {got[s]:.6f} vs {want[s]:.6f} (relative {rel:.2e} > {tol:g})")
    return worst, problems


def load_json(path):
    try:
        return json.load(open(path))
    except (OSError, ValueError):
        return None


def flops_per_token(config, summary, seq_len):
    m = {k: scalar(v) for k, v in config["model"].items()}
    matmul_params = summary["params"] - (0 if m.get("tie_embeddings") else m["vocab_size"] * m["dim"])
    return 6.0 * matmul_params + 12.0 * m["n_layers"] * seq_len * m["dim"]


def fmt_rate(x):
    return "-" if x is None else f"{x:,.0f}"


def fmt_bytes(x):
    return "-" if x is None else f"{x / 2**30:.2f} GiB"


def fmt_syncs(summary):
    syncs = summary.get("host_syncs_per_step", -1)
    return f"{syncs:g}" if syncs is not None and syncs >= 0 else "n/a (cpu)"


def describe_run(summary, device):
    """"FULL_SHARD x 2 ranks on cpu" from a run's summary.json."""
    if summary is None:
        return "?"
    return f"{summary.get('strategy', '?')} x {summary.get('world_size', '?')} rank(s) on {device}"


def launcher_row(out):
    """The FULL_SHARD `cadre run` row: its own figures only (float32, the parity batch: no MFU
    against the bf16 peak, no PyTorch peer)."""
    run = os.path.join(out, "runs", "fsdp_dev")
    if not os.path.isdir(run):
        return None
    summary = load_json(os.path.join(run, "summary.json"))
    if summary is None:
        return "| FULL_SHARD under cadre run | failed (see logs/fsdp_dev.log) | | | | | | | | |"
    config = read_yaml_sections(os.path.join(run, "config.yaml"))
    name = f"{summary['params'] / 1e6:.1f}M {summary.get('strategy')} x {summary.get('world_size')} ranks, " \
           f"cadre run (float32, batch {config['data']['batch_size']}/rank)"
    return (f"| {name} | {fmt_rate(summary.get('tokens_per_s'))} | - | "
            f"{fmt_bytes(summary.get('peak_device_bytes'))} (rank 0) | {fmt_syncs(summary)} | - | - | - | - | - |")


def ran(out, *names):
    """Whether every named run has a directory (its part ran, or runs now)."""
    return all(os.path.isdir(os.path.join(out, "runs", n)) for n in names)


def round_trip_checks(out, device, a, b, trips, refs):
    """Problems and a note for a checkpoint round trip at step 10: trips[0] resumed a's step-10
    checkpoint on b's side and is compared with the a run refs[0], trips[1] the other way."""
    if not ran(out, *trips):
        return [], [f"checkpoint round trip {a} <-> {b}: not run yet"]
    runs = os.path.join(out, "runs")
    worst_a, p1 = compare(f"round trip {a} -> {b}", losses(os.path.join(runs, trips[0])),
                          losses(os.path.join(runs, refs[0])), range(11, 21))
    worst_b, p2 = compare(f"round trip {b} -> {a}", losses(os.path.join(runs, trips[1])),
                          losses(os.path.join(runs, refs[1])), range(11, 21))
    return p1 + p2, [f"checkpoint round trip at step 10: {a} -> {b} resumes within {worst_a:.2e} of the {a} run, "
                     f"{b} -> {a} within {worst_b:.2e} of the {b} run (steps 11-20)"]


def launcher_checks(out, device):
    """Problems and notes for the launcher runs: from scratch device vs cpu at other world sizes
    and strategies, and each side's step-10 checkpoint resumed on the other."""
    runs = os.path.join(out, "runs")
    if not ran(out, "fsdp_dev", "fsdp_cpu"):
        return [], ["FULL_SHARD under cadre run: not run yet"]
    dev_summary = load_json(os.path.join(runs, "fsdp_dev", "summary.json"))
    cpu_summary = load_json(os.path.join(runs, "fsdp_cpu", "summary.json"))
    a, b = describe_run(dev_summary, device), describe_run(cpu_summary, "cpu")
    dev, cpu = losses(os.path.join(runs, "fsdp_dev")), losses(os.path.join(runs, "fsdp_cpu"))
    problems, notes = [], []
    worst, p = compare(f"{a} vs {b}", dev, cpu, range(1, 21))
    problems += p
    notes.append(f"{a} (cadre run) vs {b}, same global batch, 20 steps float32: largest relative "
                 f"difference {worst:.2e}")
    p, n = round_trip_checks(out, device, a, b, ("fsdp_trip_to_cpu", "fsdp_trip_to_dev"), ("fsdp_dev", "fsdp_cpu"))
    problems += p
    notes += n
    world = (dev_summary or {}).get("world_size")
    if world == 1:
        notes.append("the cadre run row has world size 1 (one GPU): no communicator is made at world size 1 "
                     "(src/shard/device_mesh.cpp), so it issued no collective and NCCL was not exercised; "
                     "that needs 2 or more GPUs")
    elif device == "cpu":
        notes.append(f"the cadre run row's collectives went over Gloo (Cadre's ring), {world} ranks")
    else:
        notes.append(f"the cadre run row's collectives went through NCCL, {world} ranks (one per GPU)")
    return problems, notes


def table(args):
    out = args.out
    matmul = load_json(os.path.join(out, "matmul.json")) or {}
    peak_tflops = matmul.get("tflops")
    rows, versions, compiled_mode = [], None, "compiled"
    for m in args.models.split():
        run = os.path.join(out, "runs", m)
        if not os.path.isdir(run):
            rows.append(f"| {m} | not run yet | | | | | | | | |")
            continue
        summary = load_json(os.path.join(run, "summary.json"))
        if summary is None:
            rows.append(f"| {m} | failed (see logs/{m}.log) | | | | | | | | |")
            continue
        versions = versions or summary
        config = read_yaml_sections(os.path.join(run, "config.yaml"))
        data_dir = config["data"]["dir"]
        seq_len = json.load(open(os.path.join(data_dir, "manifest.json")))["seq_len"]
        rate = summary.get("tokens_per_s")
        fpt = flops_per_token(config, summary, seq_len)
        mfu = f"{100 * rate * fpt / (peak_tflops * 1e12):.1f}%" if rate and peak_tflops else "-"
        syncs_text = fmt_syncs(summary)
        eager = load_json(os.path.join(out, "runs", f"{m}.peer_eager.json")) or {}
        compiled = load_json(os.path.join(out, "runs", f"{m}.peer_compiled.json")) or {}
        e, c = eager.get("tokens_per_s"), compiled.get("tokens_per_s")
        compiled_mode = compiled.get("mode", compiled_mode)
        ratio = lambda peer: f"{rate / peer:.2f}x" if rate and peer else "-"  # noqa: E731
        rows.append(f"| {m} ({summary['params'] / 1e6:.1f}M, seq {seq_len}) | {fmt_rate(rate)} | {mfu} | "
                    f"{fmt_bytes(summary.get('peak_device_bytes'))} | {syncs_text} | {fmt_rate(e)} | {ratio(e)} | "
                    f"{fmt_rate(c)} | {ratio(c)} | {fmt_bytes(eager.get('peak_bytes'))} |")

    launcher = launcher_row(out)
    if launcher:
        rows.append(launcher)

    problems, notes = [], []
    if ran(out, "parity_cpu", "parity_dev"):
        cpu, dev = losses(os.path.join(out, "runs", "parity_cpu")), losses(os.path.join(out, "runs", "parity_dev"))
        worst, p = compare("parity cpu vs " + args.device, dev, cpu, range(1, 21))
        problems += p
        notes.append(f"loss parity cpu vs {args.device}, 20 steps float32: largest relative difference {worst:.2e}")
        p, n = round_trip_checks(out, args.device, args.device, "cpu", ("trip_to_cpu", "trip_to_dev"),
                                 ("parity_dev", "parity_cpu"))
        problems += p
        notes += n
    else:
        notes.append(f"loss parity cpu vs {args.device} and the checkpoint round trip: not run yet")

    p, n = launcher_checks(out, args.device)
    problems += p
    notes += n

    v = versions or {}
    print(f"### GPU check: {v.get('device', args.device)}{' (tiny CPU rehearsal: not GPU figures)' if args.tiny == '1' else ''}\n")
    print(f"libtorch {v.get('libtorch', '?')}, CUDA {v.get('cuda') or 'none'}; PyTorch peer {matmul.get('torch', '?')}; "
          f"bf16 matmul peak measured in this run {peak_tflops:.3g} TFLOP/s (the MFU denominator)\n"
          if peak_tflops else "bf16 matmul peak: not measured\n")
    print("| model | Cadre tokens/s | MFU | peak memory | host syncs/step | PyTorch eager tokens/s | Cadre / eager "
          f"| PyTorch {compiled_mode} tokens/s | Cadre / compiled | PyTorch peak memory |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    print()
    for n in notes:
        print(f"- {n}")
    for p in problems:
        print(f"- FAILED: {p}")
    return 1 if problems else 0


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="what", required=True)
    pm = sub.add_parser("peer-model")
    pm.add_argument("config")
    tb = sub.add_parser("table")
    tb.add_argument("--out", required=True)
    tb.add_argument("--device", required=True)
    tb.add_argument("--models", required=True)
    tb.add_argument("--tiny", default="0")
    args = ap.parse_args()
    if args.what == "peer-model":
        print(peer_model(args.config))
        return 0
    return table(args)


if __name__ == "__main__":
    sys.exit(main())
