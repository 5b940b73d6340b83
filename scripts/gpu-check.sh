#!/usr/bin/env bash
# Every GPU test and the GPU benchmarks in one run, for a machine with an NVIDIA GPU (the device
# machine lent to some sessions: CUDA, NCCL and python3's torch are there, Debian's packages and
# the network are not). Fits in 8 minutes on 16 cores, so it can run twice in a 15-minute lease.
#
#   scripts/gpu-check.sh --fetch   here, on the Debian machine: download the Debian packages the
#                                  build needs and the GPU machine lacks into .deps/ (ignored by
#                                  git; name it in the device call's `carry`)
#   scripts/gpu-check.sh [--gb X]  on the GPU machine: unpack .deps/ into a private prefix when
#                                  there is one, build with CUDA against python3's torch, run
#                                  every GPU test (ipc end to end on one GPU; nccl and
#                                  sparse_nccl end to end on two, a SKIPPED line on one), the
#                                  rest of the suites, and hotswap-gpu-bench (a model of X GB,
#                                  16 by default). Logs go to $OUT when it is set.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.deps

# Headers and libraries the build needs beyond CUDA, NCCL and python3's torch. Runtime libraries
# that every Linux has (libc, libstdc++, libssl3, zlib) are left to the machine.
packages=(
  libzmq3-dev libzmq5 cppzmq-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libcpp-httplib0.11 libssl-dev libboost1.74-dev libboost-test1.74-dev libboost-test1.74.0
  libgloo-dev libibverbs-dev  # ProcessGroupGloo.hpp includes <gloo/...>; the wheel has no gloo headers
)
# What those libraries load in turn, by the soname that shows whether the machine has it: these
# are unpacked only where the machine lacks them, so the machine's own copies stay in charge.
declare -A runtime_deps=(
  [libsodium23]=libsodium.so.23 [libpgm-5.3-0]=libpgm-5.3.so.0 [libnorm1]=libnorm.so.1
  [libbsd0]=libbsd.so.0 [libmd0]=libmd.so.0 [libbrotli1]=libbrotlienc.so.1
  [libgssapi-krb5-2]=libgssapi_krb5.so.2 [libkrb5-3]=libkrb5.so.3 [libk5crypto3]=libk5crypto.so.3
  [libkrb5support0]=libkrb5support.so.0 [libcom-err2]=libcom_err.so.2
  [libkeyutils1]=libkeyutils.so.1
)

if [[ "${1:-}" == "--fetch" ]]; then
  mkdir -p "$deps"  # ignored by .gitignore
  (cd "$deps" && apt-get download "${packages[@]}" "${!runtime_deps[@]}")
  du -sh "$deps"
  exit 0
fi

gb=16
[[ "${1:-}" == "--gb" ]] && gb=$2
build=$root/build-gpu
log=${OUT:-$build}
mkdir -p "$build" "$log"
start=$SECONDS
step() { printf '\n== %s (%d s)\n' "$*" $((SECONDS - start)); }

step "machine"
nvidia-smi -L 2>&1 || true
python3 -c 'import torch; print("python3 torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 ||
  echo "python3 has no torch: CMake takes the libtorch it finds (a CPU one cannot run the GPU tests)"
nvcc --version | tail -1

prefix_args=()
if compgen -G "$deps/*.deb" >/dev/null; then
  step "unpacking $(ls "$deps"/*.deb | wc -l) Debian packages into a private prefix"
  prefix=$build/prefix
  rm -rf "$prefix" && mkdir -p "$prefix"
  system_libs=$(ldconfig -p)  # read once: a pipe that grep -q closes early would fail pipefail
  for f in "$deps"/*.deb; do
    package=$(basename "$f"); package=${package%%_*}
    soname=${runtime_deps[$package]:-}
    if [[ -n "$soname" ]] && grep -qF "$soname (" <<<"$system_libs"; then continue; fi
    dpkg -x "$f" "$prefix"
  done
  # A -dev package's libfoo.so points at a runtime library left to the machine (libssl3,
  # say): point it at the machine's copy.
  for link in "$prefix"/usr/lib/x86_64-linux-gnu/*.so; do
    [[ -L "$link" && ! -e "$link" ]] || continue
    system=$(awk -v want="$(basename "$(readlink "$link")")" '$1 == want { print $NF; exit }' <<<"$system_libs")
    if [[ -n "$system" ]]; then ln -sf "$system" "$link"; fi
  done
  # pkg-config files name /usr; point them at the prefix.
  find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$prefix/usr|" {} +
  export PKG_CONFIG_PATH=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  prefix_args=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include")
fi

step "configure (CUDA on, python3's torch)"
if ! cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHOTSWAP_WITH_CUDA=ON \
  -DCUDAToolkit_ROOT="${CUDA_HOME:-/usr/local/cuda}" "${prefix_args[@]}" >"$log/configure.log" 2>&1; then
  tail -30 "$log/configure.log"; echo "configure failed"; exit 1
fi
grep -E '^-- hotswap' "$log/configure.log" || true

step "build"
if ! cmake --build "$build" -j"$(nproc)" >"$log/build.log" 2>&1; then
  grep -E -m 20 -A3 'error' "$log/build.log" || tail -30 "$log/build.log"; echo "build failed"; exit 1
fi

step "GPU tests"
status=0
(cd "$build" && ctest --output-on-failure -R '^(gpu\.|transport\.nccl)' 2>&1 | tee "$log/gpu-tests.log") || status=1

step "every other suite (on the GPU machine's CPUs)"
(cd "$build" && ctest -j8 -E '^gpu\.' 2>&1 | tee "$log/tests.log" | tail -5) || status=1

step "GPU benchmarks (a ${gb} GB model)"
"$build/bench/hotswap-gpu-bench" --gb "$gb" 2>&1 | tee "$log/gpu-bench.log" || status=1

step "done, status $status"
exit $status
