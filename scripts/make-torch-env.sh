#!/usr/bin/env bash
# Makes the Python environment hotswap builds against and tests in: a virtual environment
# outside the repository with the torch of scripts/python-requirements.txt (the one vLLM pins),
# numpy and pyzmq. CMake takes libtorch from it (cmake/HotswapDependencies.cmake), the `hotswap`
# package is built for its python, and the Python tests and interop peers run in it.
#
#   scripts/make-torch-env.sh          makes it (or keeps it); prints its python on the last line
#   scripts/make-torch-env.sh --python prints where its python is, and does nothing else
#
# HOTSWAP_VENV names the folder (default ~/.cache/hotswap/venv). Idempotent: an environment made
# from the same requirements is kept and nothing touches the network; one made from other
# requirements, or left half-made, is made again.
#
# torch's CUDA libraries come from one of two places:
#   toolkit  the machine's CUDA 13 toolkit already has cuBLAS, cuFFT, cuRAND, cuSOLVER,
#            cuSPARSE, NVRTC and cuDNN 9 on the loader's path: only what a toolkit lacks comes
#            from PyPI (NCCL, whose toolkit copy is older than torch's; cuSPARSELt; NVSHMEM;
#            cuFile). About 2.5 GB installed.
#   wheels   anywhere else: torch with every nvidia-* wheel it names, and nvcc from PyPI at the
#            CUDA version torch pins (CMake finds it there when the machine has no nvcc).
#            About 5.5 GB installed.
# HOTSWAP_TORCH_CUDA=toolkit|wheels overrides the choice.
#
# Ray (scripts/ray-requirements.txt, for hotswap.ray and its tests) goes into the same
# environment as a step of its own, kept by a stamp of its own: a new Ray pin installs Ray alone.
# HOTSWAP_WITH_RAY=0 leaves it out (hotswap.ray's tests then say they skipped). FlashInfer's
# headers (scripts/flashinfer-requirements.txt, for the GPU kernels) likewise, as a step and a
# stamp of their own.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${HOTSWAP_VENV:-$HOME/.cache/hotswap/venv}
requirements=$root/scripts/python-requirements.txt
# Debian's interpreter: python3-dev's headers are its own, and the `hotswap` extension is built
# for whichever python the environment was made from.
base_python=${HOTSWAP_BASE_PYTHON:-/usr/bin/python3}
if [ "${1:-}" = "--python" ]; then
  echo "$venv/bin/python"
  exit 0
fi

# The sonames libtorch_cuda needs that a CUDA 13 toolkit provides.
toolkit_sonames=(libcudart.so.13 libcublas.so.13 libcublasLt.so.13 libcufft.so.12 libcurand.so.10
                 libcusparse.so.12 libcusolver.so.12 libnvrtc.so.13 libcudnn.so.9)
toolkit_has_cuda13() {
  local nvcc=${CUDAToolkit_ROOT:-/usr/local/cuda}/bin/nvcc libs
  [ -x "$nvcc" ] && "$nvcc" --version 2>/dev/null | grep -q 'release 13\.' || return 1
  libs=$(ldconfig -p)
  for soname in "${toolkit_sonames[@]}"; do
    grep -qF "$soname (" <<<"$libs" || return 1
  done
}

mode=${HOTSWAP_TORCH_CUDA:-}
if [ -z "$mode" ]; then
  if toolkit_has_cuda13; then mode=toolkit; else mode=wheels; fi
fi
case $mode in toolkit|wheels) ;; *) echo "HOTSWAP_TORCH_CUDA must be toolkit or wheels, not '$mode'" >&2; exit 2 ;; esac
stamp="$(sha256sum "$requirements" | cut -c1-16) $mode $($base_python -c 'import sys; print(sys.version.split()[0])')"

ray_requirements=$root/scripts/ray-requirements.txt
ensure_ray() {
  [ "${HOTSWAP_WITH_RAY:-1}" = 0 ] && return 0
  local ray_stamp
  ray_stamp=$(sha256sum "$ray_requirements" | cut -c1-16)
  if [ -f "$venv/.hotswap-ray-ready" ] && [ "$(cat "$venv/.hotswap-ray-ready")" = "$ray_stamp" ] &&
     "$venv/bin/python" -c 'import ray' 2>/dev/null; then
    return 0
  fi
  echo "make-torch-env: installing $(grep -vE '^(#|$)' "$ray_requirements" | xargs) into $venv"
  # Ray is optional: without it hotswap.ray's tests say they skipped, and everything else runs.
  if "$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check \
       -r "$ray_requirements"; then
    echo "$ray_stamp" >"$venv/.hotswap-ray-ready"
  else
    echo "make-torch-env: warning: Ray did not install; hotswap.ray's tests will skip" >&2
  fi
}

flashinfer_requirements=$root/scripts/flashinfer-requirements.txt
ensure_flashinfer() {
  local stamp_now
  stamp_now=$(sha256sum "$flashinfer_requirements" | cut -c1-16)
  if [ -f "$venv/.hotswap-flashinfer-ready" ] &&
     [ "$(cat "$venv/.hotswap-flashinfer-ready")" = "$stamp_now" ]; then
    return 0
  fi
  echo "make-torch-env: installing $(grep -vE '^(#|$)' "$flashinfer_requirements" | xargs)" \
    "(its CUDA headers only) into $venv"
  # --no-deps: hotswap compiles its headers and never imports it (its dependencies are a JIT's).
  "$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check --no-deps \
    -r "$flashinfer_requirements"
  echo "$stamp_now" >"$venv/.hotswap-flashinfer-ready"
}

if [ -f "$venv/.hotswap-ready" ] && [ "$(cat "$venv/.hotswap-ready")" = "$stamp" ] &&
   "$venv/bin/python" -c 'import torch, numpy, zmq' 2>/dev/null; then
  ensure_ray
  ensure_flashinfer
  echo "make-torch-env: kept $venv ($mode)"
  echo "$venv/bin/python"
  exit 0
fi

echo "make-torch-env: making $venv (torch's CUDA libraries from the $mode; first time only)"
start=$SECONDS
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$base_python" -m venv "$venv"
pip=("$venv/bin/python" -m pip install -q --no-input --disable-pip-version-check)
if [ "$mode" = wheels ]; then
  # With every CUDA library from PyPI, and nvcc too: torch's CMake config enables CUDA, so a
  # machine without a toolkit configures with the nvcc of torch's own cuda-toolkit pin (its
  # crt and nvvm resolved with it: a newer nvvm's PTX is refused by that ptxas, seen).
  "${pip[@]}" -r "$requirements"
  toolkit_pin=$("$venv/bin/python" - <<'PY'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    if req.startswith("cuda-toolkit") and "extra ==" not in req:
        print(re.sub(r"\[[^]]*\]", "[nvcc]", req.split(";")[0].strip()))
PY
  )
  if [ -n "$toolkit_pin" ]; then
    "${pip[@]}" "$toolkit_pin"
    cu=$("$venv/bin/python" -c 'import nvidia, os, torch; print(os.path.join(list(nvidia.__path__)[0], "cu" + torch.version.cuda.split(".")[0]))')
    # FindCUDAToolkit looks for the unversioned name a toolkit has and a wheel does not.
    ln -sf libcudart.so.13 "$cu/lib/libcudart.so"
  fi
else
  # torch alone, then what it requires but a toolkit lacks. Its own metadata names them, so a
  # new torch pin brings its own NCCL and the rest without an edit here.
  torch_pin=$(grep -E '^torch==' "$requirements")
  "${pip[@]}" --no-deps "$torch_pin"
  mapfile -t needs < <("$venv/bin/python" - <<'PY'
import importlib.metadata as md, re
for req in md.requires("torch") or []:
    if "extra ==" in req:
        continue
    name = re.match(r"[A-Za-z0-9_.-]+", req).group(0).lower()
    spec = req.split(";")[0].strip()
    if name == "cuda-toolkit":
        # The toolkit brings all of these but cuFile; keep the pin, ask for that one extra.
        print(re.sub(r"\[[^]]*\]", "[cufile]", spec))
    elif name.startswith("nvidia-cudnn"):
        continue  # the toolkit's cuDNN 9
    elif name in ("triton", "cuda-bindings"):
        continue  # torch.compile and cuda-python only; importing torch needs neither
    else:
        print(spec)
PY
  )
  echo "make-torch-env: pip may now say torch requires cuda-bindings, nvidia-cudnn-cu13 and triton:" \
    "expected (the toolkit's cuDNN serves; hotswap uses neither torch.compile nor cuda-python)"
  "${pip[@]}" "${needs[@]}"
  grep -vE '^(#|torch==|$)' "$requirements" | xargs "${pip[@]}"
  # libtorch_cuda must find every library it names, or nothing that links it can start.
  missing=$(ldd "$("$venv/bin/python" -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')" |
            grep 'not found' || true)
  if [ -n "$missing" ]; then
    echo "make-torch-env: libtorch_cuda cannot find, with the toolkit's libraries:" >&2
    echo "$missing" >&2
    echo "(run again with HOTSWAP_TORCH_CUDA=wheels to take every CUDA library from PyPI)" >&2
    exit 1
  fi
fi
"$venv/bin/python" -c 'import torch; torch.ones(2).sum().item()'
echo "$stamp" >"$venv/.hotswap-ready"
ensure_ray
ensure_flashinfer
echo "make-torch-env: $venv ready in $((SECONDS - start)) s, $(du -sh "$venv" | cut -f1) ($("$venv/bin/python" -c 'import torch; print("torch", torch.__version__)'))"
echo "$venv/bin/python"
