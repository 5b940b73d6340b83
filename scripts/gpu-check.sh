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
#                                  every GPU suite (generation on cuda:0; ipc end to end on one
#                                  GPU; nccl and sparse_nccl end to end on two, skipped on one)
#                                  with one line each saying what ran, what skipped and why, the
#                                  rest of the suites, and hotswap-gpu-bench (a model of X GB:
#                                  4 by default, so that a first run fits; --gb 16 for the
#                                  figures the README quotes). Logs go to $OUT when it is set.
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
  # The device tool carries at most 64 MiB of ignored paths in all.
  kib=$(du -sk "$deps" | cut -f1)
  echo ".deps: $((kib / 1024)) MiB"
  if ((kib > 60 * 1024)); then
    echo "error: .deps is over 60 MiB; the device tool's carry limit is 64 MiB in all" >&2
    exit 1
  fi
  exit 0
fi

gb=4
[[ "${1:-}" == "--gb" ]] && gb=$2
build=$root/build-gpu
log=${OUT:-$build}
mkdir -p "$build" "$log"
start=$SECONDS
step() { printf '\n== %s (%d s)\n' "$*" $((SECONDS - start)); }

# "x.y.z" >= "a.b.c"
version_at_least() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]; }

step "machine"
if command -v nvidia-smi >/dev/null; then
  # Exclusive_Process lets one process hold the GPU: the ipc tests put a trainer and a worker
  # on it together, and would fail with cudaErrorDevicesUnavailable.
  nvidia-smi --query-gpu=index,name,compute_mode,memory.total,driver_version --format=csv,noheader ||
    true
  if nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qi exclusive; then
    echo "warning: a GPU is in an exclusive compute mode; the ipc suites need two processes on it"
  fi
else
  echo "nvidia-smi is not on PATH"
fi
python3 -c 'import torch; print("python3 torch", torch.__version__, "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 ||
  echo "python3 has no torch: CMake takes the libtorch it finds (a CPU one cannot run the GPU tests)"
cuda_root=${CUDA_HOME:-/usr/local/cuda}
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x "$cuda_root/bin/nvcc" ]] && nvcc=$cuda_root/bin/nvcc
if [[ -n "$nvcc" ]]; then
  "$nvcc" --version | tail -1 || true
else
  echo "nvcc: not on PATH nor in $cuda_root/bin; CMake looks for the CUDA toolkit in $cuda_root"
fi
# What the build needs, checked before minutes go into it.
cmake_version=$(cmake --version 2>/dev/null | awk 'NR == 1 { print $3 }')
cxx=${CXX:-$(command -v g++ || command -v c++ || true)}
cxx_version=$([[ -n "$cxx" ]] && "$cxx" -dumpfullversion 2>/dev/null || true)
echo "cmake ${cmake_version:-missing}, C++ compiler ${cxx:-missing} ${cxx_version}"
if [[ -z "$cmake_version" ]] || ! version_at_least "$cmake_version" 3.25; then
  echo "error: hotswap needs cmake 3.25 or newer" >&2; exit 1
fi
if [[ -z "$cxx_version" ]] || { "$cxx" --version | grep -q 'g++\|GCC' && ! version_at_least "$cxx_version" 12; }; then
  echo "error: hotswap needs a C++20 compiler (g++ 12 or newer)" >&2; exit 1
fi

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
  -DCUDAToolkit_ROOT="$cuda_root" "${prefix_args[@]}" >"$log/configure.log" 2>&1; then
  tail -30 "$log/configure.log"; echo "configure failed"; exit 1
fi
grep -E '^-- hotswap' "$log/configure.log" || true

step "build"
if ! cmake --build "$build" -j"$(nproc)" >"$log/build.log" 2>&1; then
  grep -E -m 20 -A3 'error' "$log/build.log" || tail -30 "$log/build.log"; echo "build failed"; exit 1
fi

step "GPU suites, one line each"
status=0
gpu_suite() {  # binary suite: runs it alone, says what happened in one line
  local binary=$1 suite=$2 rc=0
  timeout 300 "$build/tests/$binary" --run_test="$suite" >"$log/$suite.log" 2>&1 || rc=$?
  case $rc in
    0) echo "$suite: ran, passed" ;;
    77) echo "$suite: skipped: $(grep -m1 -o 'SKIPPED: .*' "$log/$suite.log" | cut -c10-)" ;;
    124) echo "$suite: FAILED: timed out after 300 s (log: $suite.log)"; status=1 ;;
    *) echo "$suite: FAILED (exit $rc): $(grep -m1 -E 'error|fatal' "$log/$suite.log" | cut -c1-200)"
       status=1 ;;
  esac
}
gpu_suite hotswap_transport_tests device_sync
gpu_suite hotswap_transport_tests nccl_communicator
gpu_suite hotswap_gpu_tests generation_gpu
gpu_suite hotswap_gpu_tests ipc_gpu
gpu_suite hotswap_gpu_tests nccl_gpu
gpu_suite hotswap_gpu_tests tensor_parallel_gpu

step "every other suite (on the GPU machine's CPUs)"
(cd "$build" && ctest -j8 -E '^gpu\.' 2>&1 | tee "$log/tests.log" | tail -5) || status=1

step "GPU benchmarks (a ${gb} GB model)"
"$build/bench/hotswap-gpu-bench" --gb "$gb" 2>&1 | tee "$log/gpu-bench.log" || status=1

step "done, status $status"
exit $status
