#!/usr/bin/env bash
# The GPU checks in one run (scripts/device_check.py): the engine on CUDA against the naive
# reference, the cuda connector against a raw device copy, the live P2P matrix, a short
# sweep; every figure into one JSON file. --dry-run takes the same steps on the CPU.
#   bash scripts/device_check.sh [--dry-run] [--out FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-results}/device_check.json"
args=()
dry=0
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) dry=1; args+=("$1") ;;
    --out) out="$2"; shift ;;
    *) echo "device_check.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
# The Python to run: this project's environment where it has what the run needs (a CUDA
# torch for the real run); else a system Python whose torch sees a GPU, with the project
# installed into it (without touching its torch).
py=.venv/bin/python
if [ "$dry" = 0 ] && ! { [ -x "$py" ] && "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; }; then
  py=python3
  if ! "$py" -c 'import torch, sys; sys.exit(not torch.cuda.is_available())'; then
    echo "device_check.sh: no Python here has a torch that sees a GPU" >&2
    exit 2
  fi
  "$py" -m pip install -q --disable-pip-version-check --no-deps -e . \
    || echo "device_check.sh: could not install the project; running it from the tree" >&2
  "$py" -m pip install -q --disable-pip-version-check numpy pandas aiohttp typer rich \
    tokenizers tiktoken jinja2 prometheus_client pyyaml safetensors matplotlib 2>/dev/null \
    || echo "device_check.sh: some dependencies may be missing (no package index?)" >&2
elif [ ! -x "$py" ]; then
  bash .ci/setup
fi
exec "$py" scripts/device_check.py "${args[@]}" --out "$out"
