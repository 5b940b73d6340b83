#!/usr/bin/env bash
# The wheel users install: `pip wheel .` in the torch environment, installed into a folder of its
# own, must carry everything it needs (no library of this build tree), import under that torch,
# pass the bindings suite against real workers, and refuse another torch by name.
#
#   tests/trainer_sdk/python_wheel_test.sh PYTHON SOURCE_DIR WORKER MAKE_MODEL
set -euo pipefail
python=$1 root=$2 worker=$3 make_model=$4
work=$(mktemp -d /tmp/hotswap-wheel-XXXXXX)
trap 'rm -rf "$work"' EXIT
here=$(cd "$(dirname "$0")" && pwd)

start=$SECONDS
# --no-build-isolation: the build must see this environment's torch, the one it links.
HOTSWAP_JOBS=${HOTSWAP_JOBS:-2} "$python" -m pip wheel -q --no-build-isolation --no-deps \
  -w "$work/dist" "$root"
wheel=$(ls "$work"/dist/hotswap-*.whl)
echo "built $(basename "$wheel") ($(du -h "$wheel" | cut -f1)) in $((SECONDS - start)) s"

"$python" -m pip install -q --no-deps --target "$work/site" "$wheel"
ext=$(ls "$work"/site/hotswap/_C*.so)
test -f "$work/site/hotswap/_build_info.py"
test -f "$work/site/hotswap/ray/worker_group.py"  # hotswap.ray, the optional part
if ldd "$ext" | grep -E 'libhotswap|not found'; then
  echo "the wheel's extension needs a library that is not in the wheel or the torch environment"
  exit 1
fi

export PYTHONPATH=$work/site
"$python" -c 'import hotswap, torch; assert hotswap.HAVE_TRAINER_SDK; print("imported", hotswap.__file__, "under torch", torch.__version__)'
"$python" "$here/python_torch_mismatch_test.py"
"$python" "$here/python_bindings_test.py" "$worker" "$make_model"
