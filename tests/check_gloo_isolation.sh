#!/usr/bin/env bash
# PyPI's torch ships no gloo headers, so torch's c10d/ProcessGroupGloo.hpp is compiled against
# Debian's libgloo-dev, an older gloo than the one inside libtorch. That is safe only while
# hotswap takes gloo's names and nothing else: no gloo function, vtable or type info compiled
# from those headers may reach a binary. Checks both halves of that on the build:
#   1. only transport/gloo_backend.cpp includes ProcessGroupGloo.hpp or a gloo header;
#   2. its object file defines no symbol of namespace gloo (inline code would be defined there).
#
#   tests/check_gloo_isolation.sh SOURCE_DIR BUILD_DIR
set -u
src=$1 build=$2
status=0
hits=$(grep -rnE '#include [<"](gloo/|torch/csrc/distributed/c10d/(ProcessGroupGloo|GlooDeviceFactory))' \
  "$src"/{protocol,transport,model_loader,receiver,worker,trainer_sdk,tests,bench,fuzz} \
  --include='*.hpp' --include='*.cpp' --include='*.h' | grep -v '^[^:]*transport/gloo_backend\.cpp:')
if [ -n "$hits" ]; then
  echo "gloo isolation: only transport/gloo_backend.cpp may include gloo's headers:"
  echo "$hits"
  status=1
fi
object=$(find "$build" -path '*hotswap_transport.dir/gloo_backend.cpp.o' -print -quit)
if [ -z "$object" ]; then
  echo "gloo isolation: no gloo_backend.cpp.o under $build (build hotswap_transport first)"
  exit 1
fi
# Defined symbols (not U), demangled; a gloo entity's own name, or its vtable or type info.
defined=$(nm -C --defined-only "$object" | cut -c20- |
          grep -E '^(vtable for |typeinfo for |typeinfo name for |non-virtual thunk to )?(::)?gloo::' || true)
if [ -n "$defined" ]; then
  echo "gloo isolation: $object defines gloo code from Debian's headers:"
  echo "$defined" | head -20
  status=1
fi
if ((status == 0)); then
  echo "gloo isolation: gloo's headers give names only ($(nm --defined-only "$object" | wc -l) symbols defined, none of gloo)"
fi
exit $status
