#!/usr/bin/env bash
# Makes the two virtual environments with vLLM from PyPI that the vLLM conformance tests
# (tests/vllm/run.sh) and tests/worker/run_vllm_client_test.sh run with, outside the repository:
#
#   DIR/vllm-0.33   pip install vllm==0.33.0 (brings torch and every other dependency)
#   DIR/vllm-0.34   a copy of vllm-0.33, then pip install --no-deps vllm==0.34.0 (0.34's pinned
#                   flashinfer-python==0.7.3 is not on the index; nothing else it needs differs)
#
#   scripts/make-vllm-env.sh [DIR]      DIR defaults to ~/.cache/hotswap
#
# Idempotent: an environment that already imports the right vLLM is kept; one left half-made by
# an interrupted run is made again. Prints the HOTSWAP_VLLM_PYTHON lines to use. PYTHON names the
# interpreter the environments are made from (default python3; vLLM 0.33 wants 3.10 to 3.13).
# Needs the network (PyPI) and about 10 GB of disk per environment.
set -euo pipefail

dir=${1:-$HOME/.cache/hotswap}
python=${PYTHON:-python3}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
v033=$dir/vllm-0.33
v034=$dir/vllm-0.34

# True when $1 is a finished environment whose vllm is version $2.
ready() {
  [ -f "$1/.hotswap-vllm-ready" ] && [ -x "$1/bin/python" ] &&
    [ "$("$1/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null | tail -1)" = "$2" ]
}

if ready "$v033" 0.33.0; then
  echo "kept $v033 (vLLM 0.33.0)"
else
  echo "making $v033 (vLLM 0.33.0 and its dependencies: several minutes)"
  rm -rf "$v033"
  "$python" -m venv "$v033"
  "$v033/bin/python" -m pip install -q --upgrade pip
  "$v033/bin/python" -m pip install -q vllm==0.33.0
  touch "$v033/.hotswap-vllm-ready"
fi

if ready "$v034" 0.34.0; then
  echo "kept $v034 (vLLM 0.34.0)"
else
  echo "making $v034 (a copy of vllm-0.33 with vLLM 0.34.0, --no-deps)"
  rm -rf "$v034" "$v034.partial"
  cp -a "$v033" "$v034.partial"
  rm -f "$v034.partial/.hotswap-vllm-ready"
  # A venv names its own path in its scripts (shebangs of pip and the console scripts, activate)
  # and pyvenv.cfg: point the copy's at itself, or its pip would install into vllm-0.33.
  { grep -rlI --null -F "$v033" "$v034.partial/bin" "$v034.partial/pyvenv.cfg" 2>/dev/null || true; } |
    xargs -0 -r sed -i "s#$v033#$v034#g"
  mv "$v034.partial" "$v034"
  "$v034/bin/python" -m pip install -q --no-deps vllm==0.34.0
  touch "$v034/.hotswap-vllm-ready"
fi

for v in "$v033" "$v034"; do
  "$v/bin/python" -c 'import vllm.distributed.weight_transfer.clients' 2>/dev/null ||
    { echo "$v: vllm does not import" >&2; exit 1; }
done
echo
echo "Use either with the vLLM tests, e.g.:"
echo "  HOTSWAP_VLLM_PYTHON=$v034/bin/python ctest --test-dir build -R vllm"
echo "  HOTSWAP_VLLM_PYTHON=$v033/bin/python ctest --test-dir build -R vllm"
echo "HOTSWAP_VLLM_PYTHON=$v034/bin/python"
