# Test helper for the pytest serving tests: starts `cadre serve` against the tiny_model fixture's
# model (or another) on a free loopback port (the server picks it: --port 0, and prints it), waits with a
# deadline until GET /health answers 200, stops it with SIGTERM (draining) and reports its exit
# code, and kills and reaps it whatever happens (also when this process dies first).
# CADRE_BIN and CADRE_TINY_MODEL come from ctest.
from __future__ import annotations

import ctypes
import math
import os
import re
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request

START_TIMEOUT_S = 120.0  # loading the model included
STOP_TIMEOUT_S = 90.0  # SIGTERM drains; the server's own --drain-timeout is 60 s
_LISTENING = re.compile(r"listening on http://127\.0\.0\.1:(\d+)\n")


_libc = ctypes.CDLL(None, use_errno=True)  # loaded here: the child between fork and exec only calls it
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child before exec: the kernel SIGKILLs it when this test process dies, even by SIGKILL.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class Server:
    """One `cadre serve`, in its own process group; use as a context manager or call close()."""

    def __init__(self, extra_args: list[str] | None = None, model: str | None = None):
        """`model`: what --model names; default the tiny_model fixture's run."""
        bin_path = os.environ.get("CADRE_BIN")
        tiny = os.environ.get("CADRE_TINY_MODEL")
        if not bin_path or not (tiny or model):
            raise RuntimeError("CADRE_BIN and CADRE_TINY_MODEL must be set (ctest does)")
        argv = [bin_path, "serve", "--model", model or os.path.join(tiny, "run"), "--host", "127.0.0.1", "--port", "0",
                *(extra_args or [])]
        self._output = bytearray()
        self._lock = threading.Lock()
        self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      stderr=subprocess.STDOUT, start_new_session=True,
                                      preexec_fn=_die_with_parent)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        try:
            self.port = self._wait_ready()
        except BaseException:
            self.close()
            raise
        self.base_url = f"http://127.0.0.1:{self.port}/v1"

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for chunk in iter(lambda: self._proc.stdout.read1(65536), b""):
            with self._lock:
                self._output += chunk

    def output(self) -> str:
        with self._lock:
            return self._output.decode(errors="replace")

    def _wait_ready(self) -> int:
        deadline = time.monotonic() + START_TIMEOUT_S
        port = None
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"cadre serve exited with {self._proc.returncode} before it was ready:\n"
                                   f"{self.output()}")
            if port is None:
                m = _LISTENING.search(self.output())
                port = int(m.group(1)) if m else None
            if port is not None:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                        if r.status == 200:
                            return port
                except (urllib.error.URLError, ConnectionError, TimeoutError):
                    pass  # not answering yet
            time.sleep(0.05)
        raise RuntimeError(f"cadre serve was not ready (GET /health answering 200) within {START_TIMEOUT_S:.0f} s:\n"
                           f"{self.output()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=30) as r:
            return r.read().decode()

    def stop(self) -> int | None:
        """SIGTERM (the server drains, then exits 0); returns the exit code, None if it did not exit in time
        (then it is killed)."""
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.close()
                return None
        self.close()
        return self._proc.returncode

    def close(self) -> None:
        """Kills the process group and reaps the server, unless it was reaped already (its group id is then
        no longer ours to signal)."""
        if self._proc.returncode is None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._proc.wait()
        self._reader.join(timeout=10)
        if self._proc.stdout is not None:
            self._proc.stdout.close()

    def __enter__(self) -> "Server":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(p / 100 * len(ordered)) - 1))]
