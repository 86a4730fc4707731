#!/usr/bin/env bash
# Prints a Python 3.11 that can make a venv with pip: one on PATH (pyenv's, say) or Debian's,
# installing python3-venv for Debian's when it lacks ensurepip. Used by scripts/setup.sh.
set -euo pipefail
can_make_venv() {
  local dir; dir=$(mktemp -d)
  "$1" -m venv "$dir/v" >/dev/null 2>&1 && "$dir/v/bin/python" -m pip --version >/dev/null 2>&1
  local ok=$?; rm -rf "$dir"; return $ok
}
for candidate in "$(command -v python3.11 || true)" /usr/bin/python3.11; do
  [[ -n $candidate && -x $candidate ]] && can_make_venv "$candidate" && { echo "$candidate"; exit 0; }
done
if [[ -x /usr/bin/python3.11 ]]; then
  sudo=""; [[ $(id -u) -eq 0 ]] || sudo="sudo"
  echo "setup: installing python3-venv for Debian's python3.11" >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >&2
  can_make_venv /usr/bin/python3.11 && { echo /usr/bin/python3.11; exit 0; }
fi
echo "setup: no Python 3.11 here can make a venv with pip (tried python3.11 on PATH and /usr/bin/python3.11)" >&2
exit 1
