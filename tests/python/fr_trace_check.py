"""Runs PyTorch's own flight-recorder analyzer on a directory of Cadre's PyTorch-format dumps
(pytorch_trace_rank_<R>, src/obs/flight_recorder_torch.h) and reports what it found.

Usage: fr_trace_check.py <dump_dir>
Runs `python -m torch.distributed.flight_recorder.fr_trace <dump_dir> -o <db.pkl>` (the code of
the `torchfrtrace` command) with this interpreter, so the project venv's torch (pinned in
python/requirements-torch.txt), then reads the database it wrote (a pickle of (types, Database))
and prints one JSON object: the analyzer's exit code and log, the ranks whose dumps it read, and
every collective it could not match on all ranks ({seq, name, state, states: each joined
rank's state of it, missing_ranks, expected_ranks}). Exits 0 when the analyzer ran (the caller judges what it found).
"""
import glob
import json
import os
import pickle
import re
import subprocess
import sys
import tempfile

import torch


def main(dump_dir):
    with tempfile.TemporaryDirectory() as tmp:
        db_path = os.path.join(tmp, "db.pkl")
        run = subprocess.run([sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", dump_dir, "-o", db_path],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        result = {"torch": torch.__version__, "exit_code": run.returncode, "log": run.stdout,
                  "ranks": sorted(int(re.search(r"(\d+)$", f).group(1))
                                  for f in glob.glob(os.path.join(dump_dir, "pytorch_trace_rank_*"))),
                  "unmatched": [], "matched": 0}
        if run.returncode == 0:
            with open(db_path, "rb") as f:
                _, db = pickle.load(f)
            for c in db.collectives:
                if c.pass_check and not c.missing_ranks:
                    result["matched"] += 1
                    continue
                # Each rank's state of this op, as the analyzer saw it: the ranks it found
                # mismatched carry their own entry; the others that joined share the first's.
                missing = set(c.missing_ranks or [])
                mismatched = c.mismatch_collectives or {}
                states = {str(r): c.collective_state for r in sorted(set(c.expected_ranks) - missing - set(mismatched))}
                states.update({str(r): m.collective_state for r, m in mismatched.items()})
                result["unmatched"].append({"seq": c.collective_seq_id, "name": c.collective_name,
                                            "state": c.collective_state, "states": states,
                                            "missing_ranks": sorted(missing),
                                            "expected_ranks": sorted(c.expected_ranks)})
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
