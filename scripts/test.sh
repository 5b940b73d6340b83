#!/usr/bin/env bash
# Installs what is missing, configures, builds with -j2, and runs every test under CTest.
# The exit status is the tests'. Usage: scripts/test.sh [extra cmake -D options]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${HOTSWAP_BUILD_DIR:-$root/build}
jobs=${HOTSWAP_JOBS:-2}

"$root/scripts/install-deps.sh"

# The pip torch of a GPU machine is picked up by CMake itself (HOTSWAP_TORCH_PYTHON).
cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}" \
  -DHOTSWAP_WERROR=ON "$@"
cmake --build "$build" -j "$jobs"
cd "$build"
ctest --output-on-failure -j "$jobs" --timeout 300
