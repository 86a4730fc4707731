#!/usr/bin/env python3
"""The matmul peak at the model's own GEMM shapes (issue #55), and the training rows' MFU against it.

`cadre doctor` measures the machine's matmul peak on one 1024^3 product; a model's GEMMs are other
shapes. This takes the small Llama's linear layers (bench/train_throughput.py's MODEL, built as the
Python peer builds it: python/llama_ref.py) and times each layer's three training GEMMs over one
micro-batch's rows (8 x 256 tokens): the forward x W^T, the input gradient g W and the weight
gradient g^T x, FLOP-weighted into one GFLOP/s figure per side:

  Cadre (each --build): `cadre bench gemm`, the kernels Cadre's linears call (float32: oneDNN's
                        sgemm; bfloat16: libtorch's, oneDNN)
  PyTorch (the venv):   F.linear, g @ W and g^T @ x, as autograd runs a linear (float32: MKL in the
                        wheel; bfloat16: oneDNN)

under the two layouts of the training rows: one process x 2 threads (the single-process rows) and
two processes x 1 thread at once, summed (the 2-rank rows). The peak at the model's shapes is the
best side's median over the sittings. With --rows (vs_pytorch2 sittings' JSON) it prints each
throughput row's MFU against it beside the MFU against doctor's 1024^3 peak, the median row figure
over the given sittings. Attention's FLOPs (in the numerator, 12 x layers x seq x dim per token)
are not among the shapes timed: they are batched products of head_dim 64, below these GEMMs'
rates, so the peak is, if anything, high for them.

Usage: bench/gemm_peak.py [--build build [--build build-torch2]] [--sittings 3] [--rows FILE ...]
                          [--measured gemm_peak.json]  (report an earlier run's sittings again)
Writes bench/results/gemm_peak.{json,md}. ~1 minute per sitting on 2 cores; a quiet machine.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.dirname(__file__))
sys.path.insert(0, os.path.join(ROOT, "python"))
from train_throughput import MODEL, flops_per_token, peer_python  # noqa: E402

TOKENS = 8 * 256  # data.batch_size x sequence, as vs_pytorch2.py trains
LAYOUTS = [(1, 2), (2, 1)]  # (processes, threads each)
DTYPES = ["float32", "bfloat16"]


def linear_shapes():
    """(in, out) -> count of the peer model's nn.Linear layers (Cadre's Llama has the same)."""
    import torch
    from llama_ref import Llama
    with torch.device("meta"):
        model = Llama(MODEL)
    return collections.Counter((m.in_features, m.out_features) for m in model.modules()
                               if isinstance(m, torch.nn.Linear))


def peer_worker(spec, dtype, threads, repeats=10, warmup=2):
    """PyTorch's side of `cadre bench gemm`, in this process: one JSON line."""
    import torch
    import torch.nn.functional as F
    torch.set_num_threads(threads)
    dt = getattr(torch, dtype)
    flops = seconds = 0.0

    def median(op):
        for _ in range(warmup):
            op()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            op()
            times.append(time.perf_counter() - start)
        return statistics.median(times)

    with torch.no_grad():
        for item in spec.split(","):
            shape, count = item.split("x")
            n_in, n_out = map(int, shape.split(":"))
            x, w, g = (torch.randn(r, c).to(dt) for r, c in ((TOKENS, n_in), (n_out, n_in), (TOKENS, n_out)))
            t = median(lambda: F.linear(x, w)) + median(lambda: g.mm(w)) + median(lambda: g.t().mm(x))
            flops += 3 * 2.0 * TOKENS * n_in * n_out * int(count)
            seconds += t * int(count)
    print(json.dumps(dict(dtype=dtype, threads=threads, kernel=f"torch {torch.__version__}",
                          gflops=flops / seconds / 1e9)))


def measure(cmd, processes):
    """Sum of GFLOP/s over `processes` copies of `cmd` run at once."""
    print("+ " + " ".join(cmd) + (f"  (x{processes} at once)" if processes > 1 else ""), file=sys.stderr, flush=True)
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True) for _ in range(processes)]
    total = 0.0
    for p in procs:
        out, _ = p.communicate()
        if p.returncode != 0:
            raise SystemExit(f"{' '.join(cmd)} exited {p.returncode}")
        total += json.loads(out.strip().splitlines()[-1])["gflops"]
    return total


def sitting(args, spec):
    sides = {os.path.basename(os.path.normpath(b)): os.path.join(ROOT, b, "bin", "cadre") for b in args.build}
    out = {}
    for dtype in DTYPES:
        for processes, threads in LAYOUTS:
            for name, cadre in sides.items():
                cmd = [cadre, "bench", "gemm", "--linears", spec, "--tokens", str(TOKENS), "--dtype", dtype,
                       "--threads", str(threads)]
                out[f"{dtype} {processes}x{threads} cadre [{name}]"] = measure(cmd, processes)
            cmd = [args.python, os.path.abspath(__file__), "--worker", spec, dtype, str(threads)]
            out[f"{dtype} {processes}x{threads} torch"] = measure(cmd, processes)
    return out


def spread(values):
    return statistics.median(values), min(values), max(values)


def row_layout(case):
    """(dtype, layout key) of a vs_pytorch2 throughput row."""
    dtype = "float32" if "float32" in case else "bfloat16"
    return dtype, ("1x2" if case.startswith("1 process") else "2x1")


def mfu_rows(paths, peaks):
    """Each throughput row's median over the sittings, MFU against the shape peak and doctor's."""
    sittings = [json.load(open(p)) for p in paths]
    fpt = sittings[0]["flops_per_token"]
    rows = collections.OrderedDict()
    for s in sittings:
        for r in s["rows"]:
            if "ratios" in r:  # a case has a row per peer: (case, peer) names one
                entry = rows.setdefault((r["case"], r["peer_name"]), dict(cadre=[], peer=[], doctor=[]))
                entry["cadre"].append(r["cadre"])
                entry["peer"].append(r["peer"])
                entry["doctor"].append(s["matmul_peak_gflops"]["fp32" if "float32" in r["case"] else "bf16"])
    out = []
    for (case, peer_name), e in rows.items():
        dtype, layout = row_layout(case)
        peak = peaks[f"{dtype} {layout}"]
        doctor = statistics.median(e["doctor"])
        cadre, peer = statistics.median(e["cadre"]), statistics.median(e["peer"])
        out.append(dict(case=case, peer_name=peer_name, cadre=cadre, peer=peer, shape_peak=peak, doctor_peak=doctor,
                        cadre_mfu=cadre * fpt / peak / 1e9, peer_mfu=peer * fpt / peak / 1e9,
                        cadre_mfu_doctor=cadre * fpt / doctor / 1e9, peer_mfu_doctor=peer * fpt / doctor / 1e9))
    return out


def peaks_of(results):
    """'dtype NxT' -> (the best side's median over the sittings, that side's name)."""
    keys = list(results[0].keys())
    peaks = {}
    for dtype in DTYPES:
        for processes, threads in LAYOUTS:
            layout = f"{processes}x{threads}"
            best = max((k for k in keys if k.startswith(f"{dtype} {layout} ")),
                       key=lambda k: statistics.median(r[k] for r in results))
            peaks[f"{dtype} {layout}"] = (statistics.median(r[best] for r in results), best.split(" ", 2)[2])
    return peaks


def report(args, spec, results, peaks, rows):
    keys = list(results[0].keys())
    lines = [f"# Matmul peak at the model's GEMM shapes ({len(results)} sitting(s), {args.measured_at})", "",
             f"Small Llama linears `{spec}` (in:out x count), {TOKENS} rows, the three training GEMMs of each; "
             "GFLOP/s, median of sittings (min-max); NxT = N processes at once x T threads, summed.", "",
             "| dtype, layout, side | GFLOP/s |", "|---|---:|"]
    for k in keys:
        m, lo, hi = spread([r[k] for r in results])
        lines.append(f"| {k} | {m:.0f} ({lo:.0f}-{hi:.0f}) |")
    for key, (peak, side) in peaks.items():
        lines.append(f"| **peak {key}** ({side}) | **{peak:.0f}** |")
    if rows:
        lines += ["", f"MFU of the training rows (median tokens/s over {len(args.rows)} sitting(s): "
                  f"{', '.join(os.path.basename(p) for p in args.rows)}) against the peak at the model's shapes "
                  "and against doctor's 1024^3 peak of the same sittings:", "",
                  "| row | Cadre tokens/s | peer | peer tokens/s | shape peak | Cadre MFU | peer MFU | "
                  "doctor peak | Cadre MFU (doctor) | peer MFU (doctor) |", "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            lines.append(f"| {r['case']} | {r['cadre']:.0f} | {r['peer_name']} | {r['peer']:.0f} | {r['shape_peak']:.0f} | "
                         f"{100 * r['cadre_mfu']:.0f}% | {100 * r['peer_mfu']:.0f}% | {r['doctor_peak']:.0f} | "
                         f"{100 * r['cadre_mfu_doctor']:.0f}% | {100 * r['peer_mfu_doctor']:.0f}% |")
    return "\n".join(lines) + "\n"


def main():
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        return peer_worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", action="append", help="a Cadre build folder (repeatable; default build)")
    ap.add_argument("--python", default=peer_python())
    ap.add_argument("--sittings", type=int, default=3)
    ap.add_argument("--rows", nargs="*", default=[], help="vs_pytorch2 sittings' JSON: MFU of their rows")
    ap.add_argument("--measured", help="a gemm_peak.json written before: its sittings' figures, none measured")
    args = ap.parse_args()
    args.build = args.build or ["build"]
    spec = ",".join(f"{i}:{o}x{c}" for (i, o), c in sorted(linear_shapes().items()))
    earlier = json.load(open(args.measured)) if args.measured else {}
    results = earlier.get("sittings", [])
    args.measured_at = earlier.get("measured_at", "an earlier run") if args.measured else time.strftime("%Y-%m-%d %H:%M")
    for k in range(0 if args.measured else args.sittings):
        print(f"sitting {k + 1} of {args.sittings}", file=sys.stderr, flush=True)
        results.append(sitting(args, spec))
    peaks = peaks_of(results)
    rows = mfu_rows(args.rows, {key: peak for key, (peak, _) in peaks.items()}) if args.rows else []
    text = report(args, spec, results, peaks, rows)
    print(text)
    os.makedirs(os.path.join(ROOT, "bench/results"), exist_ok=True)
    with open(os.path.join(ROOT, "bench/results/gemm_peak.md"), "w") as f:
        f.write(text)
    with open(os.path.join(ROOT, "bench/results/gemm_peak.json"), "w") as f:
        json.dump(dict(linears=spec, tokens=TOKENS, measured_at=args.measured_at, sittings=results,
                       peaks={key: peak for key, (peak, _) in peaks.items()}, rows=rows,
                       flops_per_token=flops_per_token(MODEL, 256)[0]), f, indent=1)


if __name__ == "__main__":
    main()
