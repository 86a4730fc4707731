#!/usr/bin/env bash
# The gloo headers matching the gloo inside torch 2.11's libtorch_cpu.so (why these headers:
# src/comm/CMakeLists.txt): Debian's source tarball of gloo d97133a, sha256-pinned, unpacked
# under ~/.cache/cadre, where the libtorch 2.x build looks. Used by scripts/setup_torch.sh and
# scripts/gpu_bundle.sh. Idempotent (a stamp holding the sha256); prints the folder.
#   fetch_gloo.sh [PYTHON]   (default python3: any Python 3 with its standard library)
set -euo pipefail
python=${1:-python3}
cache="$HOME/.cache/cadre"
# Debian's source package gloo 0.0~git20250912.d97133a-2 (sid); sha256 from its .dsc:
# http://deb.debian.org/debian/pool/main/g/gloo/gloo_0.0~git20250912.d97133a-2.dsc
gloo_url="http://deb.debian.org/debian/pool/main/g/gloo/gloo_0.0~git20250912.d97133a.orig.tar.xz"
gloo_sha256="43d930375720059ac67b1619c7d020d5d2cee79757caf4e75a1bfedb8eeb2b42"
gloo_dir="$cache/gloo-0.0~git20250912.d97133a"
if [[ "$(cat "$gloo_dir/.setup-sha256" 2>/dev/null)" != "$gloo_sha256" ]]; then
  echo "setup: fetching the gloo headers for libtorch 2.11: $gloo_url (197 KB)" >&2
  mkdir -p "$cache"
  "$python" - "$gloo_url" "$gloo_sha256" "$gloo_dir" <<'PY'
import hashlib, io, os, shutil, sys, tarfile, tempfile, urllib.request
url, sha256, dest = sys.argv[1:]
try:
    with urllib.request.urlopen(url, timeout=120) as r:
        data = r.read()
except OSError as e:
    sys.exit(f"setup: could not download {url}: {e}")
got = hashlib.sha256(data).hexdigest()
if got != sha256:
    sys.exit(f"setup: {url}: sha256 {got}, expected {sha256} (the file changed or the download is damaged)")
tmp = tempfile.mkdtemp(prefix=".gloo-", dir=os.path.dirname(dest))
with tarfile.open(fileobj=io.BytesIO(data), mode="r:xz") as tar:
    top = tar.getnames()[0].split("/")[0]
    keep = [m for m in tar.getmembers()
            if m.name.split("/")[1:2] in (["gloo"], ["CMakeLists.txt"], ["LICENSE"])]
    try:
        tar.extractall(tmp, members=keep, filter="data")
    except TypeError:  # a Python without extraction filters; the members were listed above
        tar.extractall(tmp, members=keep)
with open(os.path.join(tmp, top, ".setup-sha256"), "w") as f:
    f.write(sha256 + "\n")
shutil.rmtree(dest, ignore_errors=True)
os.rename(os.path.join(tmp, top), dest)
shutil.rmtree(tmp)
PY
  echo "setup: gloo headers in $gloo_dir" >&2
fi
echo "$gloo_dir"
