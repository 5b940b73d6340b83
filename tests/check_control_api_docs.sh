#!/usr/bin/env bash
# The control API table of docs/control-api.md lists exactly the worker's control methods, in the order of
# protocol/control_methods.cpp: a method added to the table and not to the reference (or the
# other way round) fails here. Usage: check_control_api_docs.sh HOTSWAP_WORKER docs/control-api.md
set -euo pipefail
worker=$1
reference=$2
want=$("$worker" --control-methods | /usr/bin/python3 -c \
  'import json, sys; print("\n".join(m["name"] for m in json.load(sys.stdin)["methods"]))')
have=$(sed -n '/^## Control API/,/^## Backends/p' "$reference" | grep -oE '^\| `[a-z_]+` \|' |
  grep -oE '[a-z_]+')
if [ "$want" != "$have" ]; then
  echo "the control API table of $reference and hotswap-worker --control-methods differ:"
  diff <(echo "$want") <(echo "$have") || true
  exit 1
fi
echo "control API docs: all $(echo "$want" | wc -l) methods listed, in table order"
