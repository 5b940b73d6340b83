#!/usr/bin/env bash
# The GPU tests and the GPU benchmark, for a machine with an NVIDIA GPU: the device machine lent
# to some sessions, where CUDA, NCCL, cmake, ninja and python3's torch are installed but Debian's
# packages and the network are not. docs/gpu-check.md has the stages, the figures and the
# device call.
#
#   scripts/gpu-check.sh --fetch       here, on a Debian machine with network: the Debian packages
#                                      the build needs and the GPU machine lacks, into .deps/
#                                      (ignored by git; the device call carries it)
#   scripts/gpu-check.sh --configure   here: the dependency and configure stages only, against
#                                      .deps/ alone (the system's own -dev packages are hidden
#                                      from CMake and pkg-config), into build-gpu-configure/
#   scripts/gpu-check.sh --quick       on the GPU machine, from bare, in one go within 9 minutes on
#                                      16 cores: probe, configure with Ninja, build the GPU test
#                                      binaries and the worker, run device_sync,
#                                      nccl_communicator, generation_gpu and ipc_gpu each under
#                                      its own timeout, then the GPU benchmark at 4 GB while time
#                                      is left
#   scripts/gpu-check.sh [--gb X]      on the GPU machine: every GPU suite, every other suite, the
#                                      benchmark at X GB (4 by default)
#
# Every mode that builds writes summary.txt and gpu-check-logs.tar.gz to $OUT (the device tool
# returns 8 files at most); without $OUT, both are in <build folder>/logs/ and the build folder. The exit status is 0 only when
# every stage that ran passed.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deps=$root/.deps
start=$SECONDS

mode=full gb=4
while (($#)); do
  case $1 in
    --fetch) mode=fetch ;;
    --configure) mode=configure ;;
    --quick) mode=quick ;;
    --gb) gb=${2:?--gb needs a size in GB}; shift ;;
    *) echo "usage: scripts/gpu-check.sh [--fetch | --configure | --quick | --gb X]" >&2; exit 2 ;;
  esac
  shift
done
# Seconds this run may take in all; later stages are skipped, and said so, rather than cut off
# by the device call's own limit (which returns nothing of a pipeline it kills).
budget=${HOTSWAP_GPU_CHECK_SECONDS:-$([[ $mode == quick ]] && echo 520 || echo 1800)}

# Headers and libraries the build needs beyond CUDA, NCCL, cmake, ninja and python3's torch.
# Runtime libraries every Linux has (libc, libstdc++, libssl3, zlib) are left to the machine.
packages=(
  libzmq3-dev libzmq5 cppzmq-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libcpp-httplib0.11 libssl-dev libboost1.74-dev libboost-test1.74-dev libboost-test1.74.0
  libgloo-dev libibverbs-dev  # ProcessGroupGloo.hpp includes <gloo/...>; the wheel has no gloo headers
  libpcre2-dev libicu-dev     # the tokenizer: split patterns, NFC
  zlib1g-dev libbrotli-dev    # what cpp-httplib.pc requires
  pkgconf pkgconf-bin         # pkg-config itself, for PCRE2 and cpp-httplib
)
# What those load in turn, by the soname that shows whether the machine has it: unpacked only
# where the machine lacks it, so that the machine's own copies stay in charge.
declare -A runtime_deps=(
  [libsodium23]=libsodium.so.23 [libpgm-5.3-0]=libpgm-5.3.so.0 [libnorm1]=libnorm.so.1
  [libbsd0]=libbsd.so.0 [libmd0]=libmd.so.0 [libbrotli1]=libbrotlienc.so.1
  [libgssapi-krb5-2]=libgssapi_krb5.so.2 [libkrb5-3]=libkrb5.so.3 [libk5crypto3]=libk5crypto.so.3
  [libkrb5support0]=libkrb5support.so.0 [libcom-err2]=libcom_err.so.2
  [libkeyutils1]=libkeyutils.so.1
  [libpcre2-8-0]=libpcre2-8.so.0 [libpcre2-16-0]=libpcre2-16.so.0
  [libpcre2-32-0]=libpcre2-32.so.0 [libpcre2-posix3]=libpcre2-posix.so.3
  [libicu72]=libicuuc.so.72 [libpkgconf3]=libpkgconf.so.3
)
# The device tool carries at most 64 MiB of ignored paths in all.
carry_limit_kib=$((60 * 1024))

if [[ $mode == fetch ]]; then
  # Into a fresh folder first: a download that fails leaves the bundle there as it was.
  fresh=$(mktemp -d "$root/.deps-XXXXXX")
  trap 'rm -rf "$fresh"' EXIT
  (cd "$fresh" && apt-get download "${packages[@]}" "${!runtime_deps[@]}")
  chmod 755 "$fresh"
  rm -rf "$deps" && mv "$fresh" "$deps"  # ignored by .gitignore
  kib=$(du -sk "$deps" | cut -f1)
  echo ".deps: $(ls "$deps" | wc -l) packages, $((kib / 1024)) MiB"
  if ((kib > carry_limit_kib)); then
    echo "error: .deps is over 60 MiB; the device tool carries 64 MiB in all" >&2
    exit 1
  fi
  exit 0
fi

case $mode in
  configure) build=$root/build-gpu-configure ;;
  *) build=$root/build-gpu ;;
esac
logs=$build/logs
out=${OUT:-$build}
mkdir -p "$build" "$out"
rm -rf "$logs" && mkdir -p "$logs"
summary=$logs/summary.txt
: >"$summary"
status=0

say() { echo "$*" | tee -a "$summary"; }
# A command's output into the summary too, never failing the script (a grep that matches
# nothing ends a pipeline with 1 under pipefail).
note() { { "$@" || true; } | tee -a "$summary"; }
step() { printf '\n== %s (%d s)\n' "$*" $((SECONDS - start)); echo "-- $* (at $((SECONDS - start)) s)" >>"$summary"; }
left() { local l=$((budget - (SECONDS - start))); echo $((l > 0 ? l : 0)); }
fail() { say "FAILED: $*"; status=1; }
# On every exit path, set -e's among them: the summary and one tarball of the logs, the two
# files the device returns. A command that ended the script under set -e counts as a failure.
finish() {
  local rc=$?
  if ((rc != 0 && status == 0)); then
    status=$rc
    echo "FAILED: a command exited with $rc (the log above says which)" >>"$summary"
  fi
  echo "done in $((SECONDS - start)) s, status $status" | tee -a "$summary"
  if [[ "$out" != "$build" ]]; then cp "$summary" "$out/summary.txt" || true; fi
  tar -C "$build" -czf "$out/gpu-check-logs.tar.gz" logs 2>/dev/null || true
  exit "$status"
}
trap finish EXIT

# "x.y.z" >= "a.b.c"
version_at_least() { [[ "$(printf '%s\n%s\n' "$2" "$1" | sort -V | head -1)" == "$2" ]]; }

step "machine"
say "mode $mode, budget $budget s, $(nproc) cores"
if [[ $mode != configure ]]; then
  if command -v nvidia-smi >/dev/null; then
    say "gpu: $(nvidia-smi --query-gpu=index,name,compute_mode,memory.total,driver_version \
      --format=csv,noheader 2>&1 | paste -sd';')"
    # An exclusive compute mode lets one process hold a GPU: the ipc suites put a trainer and a
    # worker on one, and fail with cudaErrorDevicesUnavailable.
    if nvidia-smi --query-gpu=compute_mode --format=csv,noheader | grep -qi exclusive; then
      say "warning: a GPU is in an exclusive compute mode; the ipc suites need two processes on it"
    fi
  else
    say "gpu: nvidia-smi is not on PATH"
  fi
fi
# GPUs the driver reports: where there is one, a suite that skips for want of a GPU is a failure.
gpus_seen=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU' || true)
torch_python=${HOTSWAP_TORCH_PYTHON:-python3}
[[ $mode == configure ]] && torch_python=${HOTSWAP_TORCH_PYTHON:-$("$root/scripts/make-torch-env.sh" --python)}
say "torch: $("$torch_python" -c 'import torch, sys
try:
    import nvidia.nccl; nccl = "wheel nccl " + list(nvidia.nccl.__path__)[0]
except Exception as e:
    nccl = "no nccl wheel (" + type(e).__name__ + ")"
print(sys.executable, torch.__version__, "cuda", torch.version.cuda,
      "gpus", torch.cuda.device_count() if torch.version.cuda else 0, nccl)' 2>&1 | tail -1)"
cuda_root=${CUDA_HOME:-/usr/local/cuda}
nvcc=$(command -v nvcc || true)
[[ -z "$nvcc" && -x "$cuda_root/bin/nvcc" ]] && nvcc=$cuda_root/bin/nvcc
# The toolkit is the one whose nvcc this is, wherever PATH found it.
[[ -n "$nvcc" && -z "${CUDA_HOME:-}" ]] && cuda_root=$(dirname "$(dirname "$(readlink -f "$nvcc")")")
nvcc_release=$([[ -n "$nvcc" ]] && "$nvcc" --version | grep -o 'release [0-9.]*' | cut -d' ' -f2 || true)
say "nvcc: ${nvcc:-none} ${nvcc_release} (toolkit $cuda_root)"
torch_cuda=$("$torch_python" -c 'import torch; print(torch.version.cuda or "")' 2>/dev/null || true)
if [[ -n "$torch_cuda" && -n "$nvcc_release" && ${torch_cuda%%.*} != "${nvcc_release%%.*}" ]]; then
  say "warning: torch is built for CUDA $torch_cuda but nvcc is $nvcc_release: two CUDA runtimes may load"
fi
cmake_version=$( (cmake --version 2>/dev/null || true) | awk 'NR == 1 { print $3 }')
ninja_version=$(ninja --version 2>/dev/null || true)
cxx=${CXX:-$(command -v g++ || command -v c++ || true)}
cxx_version=$([[ -n "$cxx" ]] && "$cxx" -dumpfullversion 2>/dev/null || true)
say "cmake ${cmake_version:-missing}, ninja ${ninja_version:-missing}, C++ compiler ${cxx:-missing} ${cxx_version}"
if [[ -z "$cmake_version" ]] || ! version_at_least "$cmake_version" 3.25; then
  fail "hotswap needs cmake 3.25 or newer"; exit 1
fi
if [[ -z "$cxx_version" ]] || { "$cxx" --version | grep -q 'g++\|GCC' && ! version_at_least "$cxx_version" 12; }; then
  fail "hotswap needs a C++20 compiler (g++ 12 or newer)"; exit 1
fi
for tool in dpkg ldconfig; do  # unpacking the bundle needs both
  if ! command -v "$tool" >/dev/null && [[ ! -x /sbin/$tool ]]; then
    fail "$tool is missing: the .deps bundle cannot be unpacked"; exit 1
  fi
done
export PATH=$PATH:/sbin:/usr/sbin
# Ninja for a fresh build folder (a warm device's folder keeps the generator it was made with).
read -r -a generator <<<"$("$root/scripts/cmake-generator.sh" "$build")"

step "dependencies"
prefix_args=()
if compgen -G "$deps/*.deb" >/dev/null; then
  prefix=$build/prefix
  rm -rf "$prefix" && mkdir -p "$prefix"
  system_libs=$(ldconfig -p)  # read once: a pipe that grep -q closes early would fail pipefail
  unpacked=0 kept=0
  for f in "$deps"/*.deb; do
    package=$(basename "$f"); package=${package%%_*}
    soname=${runtime_deps[$package]:-}
    # configure mode hides the system's libraries too, so that it proves the bundle whole.
    if [[ $mode != configure && -n "$soname" ]] && grep -qF "$soname (" <<<"$system_libs"; then
      kept=$((kept + 1)); continue
    fi
    dpkg -x "$f" "$prefix"
    unpacked=$((unpacked + 1))
  done
  say "unpacked $unpacked Debian packages into $prefix; $kept runtime libraries the machine has"
  # A -dev package's libfoo.so can point at a runtime library left to the machine (libssl3,
  # say): point it at the machine's copy.
  # ldconfig knows sonames (libpcre2-8.so.0), the link names a file (libpcre2-8.so.0.11.2):
  # the longest prefix of the file's name that ldconfig knows is the one.
  for link in "$prefix"/usr/lib/x86_64-linux-gnu/*.so; do
    [[ -L "$link" && ! -e "$link" ]] || continue
    name=$(basename "$(readlink "$link")") system=""
    while [[ -z "$system" && $name == *.so.* ]]; do
      system=$(awk -v want="$name" '$1 == want { print $NF; exit }' <<<"$system_libs")
      name=${name%.*}
    done
    if [[ -n "$system" ]]; then ln -sf "$system" "$link"; fi
  done
  # pkg-config files name /usr; point them at the prefix.
  find "$prefix" -name '*.pc' -exec sed -i "s|^prefix=/usr|prefix=$prefix/usr|" {} +
  pc_dirs=$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig
  export LD_LIBRARY_PATH=$prefix/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  if [[ $mode == configure ]]; then
    # Only the bundle's .pc files, and CMake searches no system prefix but the toolchain's.
    export PKG_CONFIG_LIBDIR=$pc_dirs
    prefix_args+=(-DCMAKE_IGNORE_PREFIX_PATH="/usr;/usr/local")
  else
    export PKG_CONFIG_PATH=$pc_dirs${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  fi
  pkg_config=$(command -v pkg-config || true)
  if [[ $mode == configure || -z "$pkg_config" ]]; then
    pkg_config=$prefix/usr/bin/pkgconf
    # pkgconf's own search path is compiled in as /usr's; PKG_CONFIG_LIBDIR or _PATH adds ours.
    prefix_args+=(-DPKG_CONFIG_EXECUTABLE="$pkg_config")
  fi
  # Both include folders: OpenSSL keeps its configuration headers in the multiarch one.
  prefix_args+=(-DCMAKE_PREFIX_PATH="$prefix/usr"
    -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include/x86_64-linux-gnu -isystem $prefix/usr/include"
    -DBoost_NO_SYSTEM_PATHS=ON -DBOOST_ROOT="$prefix/usr" -DICU_ROOT="$prefix/usr")
  say "pkg-config: $pkg_config"
elif [[ $mode == configure ]]; then
  fail "no .deps/ to prove: run scripts/gpu-check.sh --fetch first"; exit 1
else
  say "no .deps/: the machine's own packages are used"
fi

step "configure (CUDA on, $torch_python's torch)"
if ! cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DHOTSWAP_WITH_CUDA=ON -DHOTSWAP_TORCH_PYTHON="$torch_python" \
  -DCUDAToolkit_ROOT="$cuda_root" "${prefix_args[@]}" >"$logs/configure.log" 2>&1; then
  tail -30 "$logs/configure.log"; fail "configure (configure.log)"; exit 1
fi
note grep -E '^-- hotswap' "$logs/configure.log"
# Where each dependency came from (CMake's cache): in configure mode, every one must be the
# bundle's, and every one must be there.
from_bundle=(Boost_INCLUDE_DIR ICU_INCLUDE_DIR ICU_UC_LIBRARY_RELEASE OPENSSL_INCLUDE_DIR
  OPENSSL_CRYPTO_LIBRARY ZeroMQ_INCLUDE_DIR ZeroMQ_LIBRARY pkgcfg_lib_PCRE2_pcre2-8
  PCRE2_INCLUDEDIR HTTPLIB_INCLUDEDIR cppzmq_DIR nlohmann_json_DIR CLI11_DIR)
for name in "${from_bundle[@]}" NCCL_LIBRARY Torch_DIR CMAKE_CUDA_COMPILER; do
  value=$(grep -m1 -E "^$name:" "$build/CMakeCache.txt" | cut -d= -f2- || true)
  echo "  $name=${value:-(not in the cache)}" >>"$summary"
  if [[ $mode == configure && " ${from_bundle[*]} " == *" $name "* ]]; then
    if [[ -z "$value" ]]; then fail "$name is not in CMake's cache: this check no longer sees it"
    elif [[ $value != "$prefix"* ]]; then fail "$name came from outside the bundle: $value"
    fi
  fi
done
if [[ $mode == configure ]]; then
  say "configure from the bundle: $([[ $status == 0 ]] && echo ok || echo failed)"
  exit $status
fi

step "build"
targets=(hotswap_transport_tests hotswap_gpu_tests hotswap-worker hotswap-gpu-bench
  hotswap_serving_bench)
[[ $mode == full ]] && targets=(all)
# `timeout 0` would mean no limit at all: a spent budget ends the run instead.
if (($(left) < 60)); then fail "build: not started, $(left) s of the ${budget} s budget left"; exit 1; fi
if ! timeout -k 10 "$(left)" cmake --build "$build" -j"$(nproc)" --target "${targets[@]}" \
  >"$logs/build.log" 2>&1; then
  note grep -E -m 20 -A3 'error' "$logs/build.log"
  fail "build (build.log)"; exit 1
fi
say "built ${targets[*]} in $((SECONDS - start)) s since the start"

step "GPU suites, one line each"
# binary suite gpus cap: runs one suite under min(cap, time left) and says what happened in one
# line. A suite that skips for want of its `gpus` GPUs where the driver reports that many fails.
gpu_suite() {
  local binary=$1 suite=$2 gpus=$3 cap=$4 rc=0 limit skipped
  limit=$(left)
  ((limit > cap)) && limit=$cap
  if ((limit < 20)); then say "$suite: not run: $(left) s of the ${budget} s budget left"; return; fi
  local t=$SECONDS
  timeout -k 10 "$limit" "$build/tests/$binary" --run_test="$suite" >"$logs/$suite.log" 2>&1 ||
    rc=$?
  local took="$((SECONDS - t)) s"
  case $rc in
    0) say "$suite: passed ($took)" ;;
    77)
      skipped=$(grep -m1 -o 'SKIPPED: .*' "$logs/$suite.log" | cut -c10- || true)
      if ((gpus_seen >= gpus)); then
        fail "$suite skipped on a machine whose driver reports $gpus_seen GPU(s): $skipped"
      else
        say "$suite: skipped: $skipped ($took)"
      fi ;;
    124 | 137) fail "$suite: timed out after $limit s ($suite.log)" ;;
    *) fail "$suite (exit $rc, $took): $(grep -m1 -E 'error|fatal' "$logs/$suite.log" | cut -c1-240 || true)" ;;
  esac
}
gpu_suite hotswap_transport_tests device_sync 1 60
gpu_suite hotswap_transport_tests nccl_communicator 1 90
gpu_suite hotswap_gpu_tests generation_gpu 1 150
gpu_suite hotswap_gpu_tests ipc_gpu 1 150
gpu_suite hotswap_gpu_tests kernels_gpu 1 120
gpu_suite hotswap_gpu_tests kernel_path_gpu 1 120
if [[ $mode == full ]]; then
  gpu_suite hotswap_transport_tests nccl_communicator_two_gpus 2 300
  for suite in nccl_gpu tensor_parallel_gpu; do
    gpu_suite hotswap_gpu_tests "$suite" 2 300
  done
  gpu_suite hotswap_gpu_tests nccl_gpu_three 3 300
  step "every other suite (on the GPU machine's CPUs)"
  if (($(left) < 60)); then
    say "ctest: not run: $(left) s of the ${budget} s budget left"
  else
    # The GPU suites ran above, each on its own line.
    (cd "$build" && timeout -k 10 "$(left)" ctest -j8 -LE gpu \
      -E '^transport\.(device_sync|nccl_communicator)$' >"$logs/tests.log" 2>&1) ||
      fail "ctest ($(grep -m1 'tests passed' "$logs/tests.log" || echo 'see tests.log'))"
    say "$(grep -m1 'tests passed' "$logs/tests.log" || echo 'ctest: no summary line')"
  fi
fi

step "GPU benchmark (a ${gb} GB model)"
if (($(left) < 90)); then
  say "benchmark: not run: $(left) s of the ${budget} s budget left"
else
  timeout -k 5 "$(($(left) - 15))" "$build/bench/hotswap-gpu-bench" --gb "$gb" \
    >"$logs/gpu-bench.log" 2>&1 || fail "benchmark (exit $?, gpu-bench.log)"
  # The table, not the JSON lines: those stay in the log.
  note bash -c "grep -v '^{' '$logs/gpu-bench.log' | tail -25"
fi
# 64 HTTP completion streams into a worker on cuda:0 against its engine alone (target: 0.85x).
if (($(left) >= 60)); then
  timeout -k 5 "$(($(left) - 10))" "$build/bench/hotswap_serving_bench" --device cuda:0 \
    --dtype bfloat16 --reps 3 >"$logs/serving-bench.log" 2>&1 ||
    fail "serving benchmark (exit $?, serving-bench.log)"
  note bash -c "grep -v '^{' '$logs/serving-bench.log' | tail -6"
else
  say "serving benchmark: not run: $(left) s of the ${budget} s budget left"
fi
exit $status
