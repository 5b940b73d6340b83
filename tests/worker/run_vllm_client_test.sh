#!/usr/bin/env bash
# Runs vllm_http_client_test.py with a python that has vLLM (HOTSWAP_VLLM_PYTHON, else python3),
# or says clearly that it was skipped: CI does not install vLLM.
set -u
py=${HOTSWAP_VLLM_PYTHON:-python3}
if ! "$py" -c "import vllm.distributed.weight_transfer.clients" >/dev/null 2>&1; then
  echo "SKIPPED: vLLM is not installed for '$py'; set HOTSWAP_VLLM_PYTHON to a python with vllm"
  exit 77
fi
exec "$py" "$(dirname "$0")/vllm_http_client_test.py" "$1" "$2"
