#!/usr/bin/env bash
# Prints the CMake generator option for a build folder: -GNinja for a fresh folder when ninja is
# installed, nothing otherwise. Ninja compiles a library's dependents while the library links,
# where Make's targets wait for each other, so on two cores a core idles less at each of the
# build's library boundaries. A folder configured before keeps its generator (CMake refuses to
# switch one), so existing build folders go on as they are.
#
#   cmake -S . -B build $(scripts/cmake-generator.sh build) ...
build=$1
if [[ ! -f "$build/CMakeCache.txt" ]] && command -v ninja >/dev/null; then
  echo "-GNinja"
fi
