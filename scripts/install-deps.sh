#!/usr/bin/env bash
# Installs what hotswap builds and tests with: Debian's packages, then the Python environment
# with PyPI's torch that CMake takes libtorch from (scripts/make-torch-env.sh; outside the
# repository, made once per machine and reused). Idempotent: when everything is there already it
# changes nothing and touches no network.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(
  build-essential cmake ninja-build pkg-config ccache clang-format
  libgloo-dev  # names only, for torch's c10d/ProcessGroupGloo.hpp (transport/gloo_backend.cpp)
  libzmq3-dev cppzmq-dev
  nlohmann-json3-dev
  libboost-dev libboost-test-dev libbenchmark-dev  # Asio and Beast: the HTTP server
  libssl-dev libcli11-dev libcpp-httplib-dev
  libpcre2-dev libicu-dev  # the tokenizer: split patterns, Unicode normalization
  clang libclang-rt-14-dev  # libFuzzer, for scripts/fuzz.sh
  python3-dev python3-venv  # the torch environment and the `hotswap` package built for it
  python3-zmq  # the pure-Python client alone, tested in an interpreter without torch
  pybind11-dev python3-jinja2  # chat templates: Jinja2 itself, in an embedded interpreter
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -q
  "${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

"$root/scripts/make-torch-env.sh"
