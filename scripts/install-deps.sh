#!/usr/bin/env bash
# Installs the Debian packages hotswap builds and tests with. Idempotent: when every package is
# already installed it changes nothing and touches no network.
set -euo pipefail

packages=(
  build-essential cmake pkg-config ccache clang-format
  libtorch-dev libgloo-dev libopenblas0-pthread
  libzmq3-dev cppzmq-dev
  nlohmann-json3-dev
  libboost-dev libboost-test-dev libbenchmark-dev  # Asio and Beast: the HTTP server
  libssl-dev libcli11-dev libcpp-httplib-dev python3-zmq
  libpcre2-dev libicu-dev  # the tokenizer: split patterns, Unicode normalization
  python3-torch  # hosts a TCPStore the way vLLM's trainer does, for the rendezvous interop test
  clang libclang-rt-14-dev  # libFuzzer, for scripts/fuzz.sh
  python3-dev pybind11-dev  # the `hotswap` Python package (built against python3-torch)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then sudo_cmd=(sudo); fi
export DEBIAN_FRONTEND=noninteractive
"${sudo_cmd[@]}" apt-get update -q
"${sudo_cmd[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
