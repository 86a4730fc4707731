#!/usr/bin/env bash
# Prints a Python 3.11 that can make a venv with pip: one on PATH (pyenv's, say), else Debian's
# (setup installs python3-venv for it). Used by scripts/setup.sh.
set -euo pipefail
can_make_venv() {
  local dir ok=0
  dir=$(mktemp -d)
  "$1" -m venv "$dir/v" >/dev/null 2>&1 && "$dir/v/bin/python" -m pip --version >/dev/null 2>&1 || ok=1
  rm -rf "$dir"
  return $ok
}
for candidate in "$(command -v python3.11 || true)" /usr/bin/python3.11; do
  if [[ -n $candidate && -x $candidate ]] && can_make_venv "$candidate"; then
    echo "$candidate"
    exit 0
  fi
done
echo "setup: no Python 3.11 here can make a venv with pip (tried python3.11 on PATH and /usr/bin/python3.11;" \
     "Debian's needs python3-venv)" >&2
exit 1
