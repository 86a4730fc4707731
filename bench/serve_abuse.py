#!/usr/bin/env python3
"""A well-behaved client's latency against `cadre serve`, alone and while bad clients attack.

One server with its default limits (the flags a user gets), on loopback. The good client (the
official `openai` client, one request at a time: a 16-token greedy completion) measures its
latency first alone, then while abusers run: slowloris connections (half a head, then a byte
every 2 s, replaced when the server closes them), silent connections, and endless chunked
bodies (the two attacks of issue #27, and one more), all from another loopback address
(--abuse-from, 127.0.0.2), as an attacker would be. Prints p50/p99/max latency and the
failures of each phase, the ratio, and the server's peak RSS (VmHWM). --compare-bin runs the
same against another build (e.g. main's, before the HTTP layer) in the same sitting.

Usage: bench/serve_abuse.py [--bin build/bin/cadre] [--model build/tests/tiny_model/run]
                            [--requests 40] [--phase-seconds 60] [--slow 120] [--silent 40] [--floods 2]
                            [--abuse-from 127.0.0.2]
                            [--compare-bin OTHER_CADRE [--compare-model MODEL]]
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import threading
import time

import openai

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "serve", "python"))
from abuse import Slowloris, chunked_flood, connect  # noqa: E402

TIMEOUT_S = 10.0  # the good client's per-request timeout: slower counts as a failure


def start(bin_path, model):
    proc = subprocess.Popen([bin_path, "serve", "--model", model, "--port", "0"], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    deadline = time.monotonic() + 120
    for line in proc.stdout:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
        if m:
            threading.Thread(target=lambda: [None for _ in proc.stdout], daemon=True).start()
            return proc, int(m.group(1))
        if time.monotonic() > deadline:
            break
    proc.kill()
    sys.exit(f"serve_abuse: {bin_path} did not start listening")


def peak_rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmHWM:\s+(\d+) kB", f.read()).group(1)) / 1024


def good_client(port, n, label, seconds):
    """Up to n requests, one at a time, for at most `seconds`; returns latencies (ms) and failures."""
    latencies, failures = [], []
    start = time.perf_counter()
    with openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused", max_retries=0,
                       timeout=TIMEOUT_S) as client:
        for i in range(n):
            if time.perf_counter() - start > seconds:
                print(f"  {label}: stopped after {seconds:.0f} s with {i} of {n} requests asked")
                break
            t0 = time.perf_counter()
            try:
                client.completions.create(model="run", prompt="The Congress", max_tokens=16, temperature=0)
                latencies.append((time.perf_counter() - t0) * 1000)
            except Exception as e:  # counted and named: the figure is how many failed
                failures.append(type(e).__name__)
            if (i + 1) % 10 == 0 or i + 1 == n:
                print(f"  {label}: {i + 1}/{n} requests, {len(failures)} failed, "
                      f"{(time.perf_counter() - start) / (i + 1):.2f} s each", flush=True)
    return latencies, failures


class Abusers:
    def __init__(self, port, slow, silent, floods, source):
        self.port, self.source, self.stop = port, source, threading.Event()
        self.threads = [threading.Thread(target=self.slowloris, args=(slow,), daemon=True),
                        threading.Thread(target=self.silent, args=(silent,), daemon=True)]
        self.threads += [threading.Thread(target=self.flood, daemon=True) for _ in range(floods)]
        self.flood_bytes = 0
        for t in self.threads:
            t.start()

    def slowloris(self, count):
        conns = []
        while not self.stop.is_set():
            conns = [c for c in conns if not c.closed]
            while len(conns) < count and not self.stop.is_set():
                try:
                    conns.append(Slowloris(self.port, self.source))
                except OSError:
                    break
            for c in conns:
                c.drip()
            self.stop.wait(2.0)
        for c in conns:
            c.sock.close()

    def silent(self, count):
        conns = []
        while not self.stop.is_set():
            while len(conns) < count:
                try:
                    conns.append(connect(self.port, source=self.source))
                except OSError:
                    break
            self.stop.wait(1.0)
            alive = []
            for c in conns:  # replace those the server closed
                c.setblocking(False)
                try:
                    closed = c.recv(1) == b""
                except BlockingIOError:
                    closed = False
                except OSError:
                    closed = True
                (c.close() if closed else alive.append(c))
            conns = alive
        for c in conns:
            c.close()

    def flood(self):
        while not self.stop.is_set():
            try:
                _, sent = chunked_flood(self.port, cap_bytes=200 << 20, source=self.source)
                self.flood_bytes += sent
            except OSError:
                self.stop.wait(0.1)

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=60)


def pct(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, int(round(p / 100 * len(ordered) + 0.5)) - 1))]


def run(bin_path, model, args):
    print(f"{bin_path}:")
    proc, port = start(bin_path, model)
    try:
        quiet, quiet_fail = good_client(port, args.requests, "alone", args.phase_seconds)
        rss_quiet = peak_rss_mb(proc.pid)
        abusers = Abusers(port, args.slow, args.silent, args.floods, args.abuse_from)
        time.sleep(3)  # let the abusers take their connections before measuring
        loud, loud_fail = good_client(port, args.requests, "under abuse", args.phase_seconds)
        abusers.close()
        rss_loud = peak_rss_mb(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=90)
        except subprocess.TimeoutExpired:
            proc.kill()
    return {"quiet": quiet, "quiet_fail": quiet_fail, "loud": loud, "loud_fail": loud_fail, "rss_quiet": rss_quiet,
            "rss_loud": rss_loud, "flood_mb": abusers.flood_bytes / 2**20, "exit": proc.returncode}


def report(name, r, args):
    print(f"\n{name}: good client, up to {args.requests} requests in up to {args.phase_seconds:.0f} s each phase "
          f"(timeout {TIMEOUT_S:.0f} s each); abuse = {args.slow} slowloris, "
          f"{args.silent} silent, {args.floods} chunked floods ({r['flood_mb']:.0f} MiB sent in all)")
    print(f"  {'':14} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'failed':>7}")
    for label, key in (("alone", "quiet"), ("under abuse", "loud")):
        v = r[key]
        print(f"  {label:14} {pct(v, 50):9.1f} {pct(v, 99):9.1f} {pct(v, 100):9.1f} "
              f"{len(r[key + '_fail']):7d}  ({len(v)} answered)")
    print(f"  ratio under abuse / alone: p50 {pct(r['loud'], 50) / pct(r['quiet'], 50):.2f}x, "
          f"max {pct(r['loud'], 100) / pct(r['quiet'], 100):.2f}x")
    print(f"  server peak RSS: {r['rss_quiet']:.0f} MB alone, {r['rss_loud']:.0f} MB after the abuse; "
          f"exit code after SIGTERM: {r['exit']}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin", "cadre"))
    ap.add_argument("--model", default=os.path.join(ROOT, "build", "tests", "tiny_model", "run"))
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--slow", type=int, default=120)
    ap.add_argument("--silent", type=int, default=40)
    ap.add_argument("--floods", type=int, default=2)
    ap.add_argument("--phase-seconds", type=float, default=60, help="longest time the good client asks in each phase")
    ap.add_argument("--abuse-from", default="127.0.0.2", help="loopback address the abusers connect from")
    ap.add_argument("--compare-bin", help="another cadre binary to run the same against")
    ap.add_argument("--compare-model", help="the model for --compare-bin (default: --model)")
    args = ap.parse_args()
    for path in [args.bin] + ([args.compare_bin] if args.compare_bin else []):
        if not os.access(path, os.X_OK):
            sys.exit(f"serve_abuse: {path} is not an executable cadre binary")
    if not os.path.isdir(args.model) and not os.path.isfile(args.model):
        sys.exit(f"serve_abuse: --model {args.model} does not exist (build the tiny_model fixture or name a model)")
    results = [("this build", run(args.bin, args.model, args))]
    if args.compare_bin:
        results.append(("--compare-bin", run(args.compare_bin, args.compare_model or args.model, args)))
    for name, r in results:
        report(name, r, args)


if __name__ == "__main__":
    main()
