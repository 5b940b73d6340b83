#!/usr/bin/env bash
# Runs openai_client_test.py with a python that has the `openai` package (HOTSWAP_OPENAI_PYTHON,
# else python3), or says clearly that it was skipped: CI does not install it.
set -u
py=${HOTSWAP_OPENAI_PYTHON:-python3}
if ! "$py" -c "import openai" >/dev/null 2>&1; then
  echo "SKIPPED: the openai package is not installed for '$py'; set HOTSWAP_OPENAI_PYTHON to a" \
    "python with openai"
  exit 77
fi
exec "$py" "$(dirname "$0")/openai_client_test.py" "$@"
