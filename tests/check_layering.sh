#!/usr/bin/env bash
# Checks the dependency arrows of docs/architecture.md on the sources themselves: a header
# included across a forbidden arrow fails here even where the include path would allow it.
set -u
root=${1:-.}
status=0
forbid() {  # forbid FOLDER PATTERN WHY
  local hits
  hits=$(grep -rnE "#include [<\"]($2)" "$root/$1" --include='*.hpp' --include='*.cpp' --include='*.h' 2>/dev/null)
  if [ -n "$hits" ]; then
    echo "layering: $1/ must not include $2 ($3):"
    echo "$hits"
    status=1
  fi
}
forbid protocol 'torch/|ATen/|c10/|caffe2/' "protocol/ stays free of libtorch so orchestrators link it cheaply"
forbid protocol 'transport/|model_loader/|receiver/|worker/|trainer_sdk/' "protocol/ depends on nothing of hotswap"
forbid transport 'model_loader/|receiver/|worker/|trainer_sdk/' "transport/ depends on protocol only"
forbid model_loader 'receiver/|worker/|trainer_sdk/' "model_loader/ depends on protocol and transport only"
forbid receiver 'worker/|trainer_sdk/' "the worker side never depends on trainer_sdk"
forbid worker 'trainer_sdk/' "the worker never depends on trainer_sdk"
forbid trainer_sdk 'receiver/|worker/' "trainer_sdk meets the worker only in protocol/ and on the wire"
# Inside worker/, rooms with one-way arrows: serving/ (scheduler, adapters, metrics) knows only
# model_loader and the log line; routes/ (a folder per serving route) knows serving/; the
# service, its sessions and parallel/ know both; frontends/ (ZeroMQ and HTTP) sit on top, and
# nothing below includes them.
hits=$(grep -rnE '#include "worker/' "$root/worker/serving" --include='*.hpp' --include='*.cpp' | grep -vE '#include "worker/(serving/|log_line\.hpp)')
if [ -n "$hits" ]; then echo "layering: worker/serving/ may include only serving/ and log_line.hpp of the worker:"; echo "$hits"; status=1; fi
hits=$(grep -rnE '#include "worker/' "$root/worker/routes" --include='*.hpp' --include='*.cpp' 2>/dev/null | grep -vE '#include "worker/(routes/|serving/|log_line\.hpp)')
if [ -n "$hits" ]; then echo "layering: worker/routes/ may include only routes/, serving/ and log_line.hpp of the worker:"; echo "$hits"; status=1; fi
hits=$(grep -rnE '#include "worker/frontends/' "$root/worker" --include='*.hpp' --include='*.cpp' | grep -vE '^[^:]*/worker/(frontends/|worker_main\.cpp:)')
if [ -n "$hits" ]; then echo "layering: only worker/frontends/ and worker_main.cpp include the front ends:"; echo "$hits"; status=1; fi
# The WorkerService wires the rooms together: only what sits above it (the front ends and the
# program) includes it, so no room inside worker/ loops back through it.
hits=$(grep -rnE '#include "worker/worker_service\.hpp"' "$root/worker" --include='*.hpp' --include='*.cpp' | grep -vE '^[^:]*/worker/(frontends/|worker_main\.cpp:|worker_service\.cpp:)')
if [ -n "$hits" ]; then echo "layering: only worker/frontends/ and worker_main.cpp include worker_service.hpp:"; echo "$hits"; status=1; fi
# The tokenizer reads tokenizer.json and text: no libtorch, no model code.
hits=$(grep -rnE '#include [<"](torch/|ATen/|c10/|model_loader/(servable|architectures/|layerwise|parameter_store))' "$root/model_loader/tokenizer" 2>/dev/null)
if [ -n "$hits" ]; then echo "layering: model_loader/tokenizer/ stays free of libtorch and model code:"; echo "$hits"; status=1; fi
# trainer_sdk may use model_loader's safetensors writer (the disk backend writes checkpoints),
# nothing else of it: no model code on the trainer side.
hits=$(grep -rnE '#include "model_loader/' "$root/trainer_sdk" | grep -vE 'model_loader/(safetensors_writer|safetensors_file|mapped_file|checkpoint)\.hpp')
if [ -n "$hits" ]; then echo "layering: trainer_sdk/ may use only model_loader's safetensors files:"; echo "$hits"; status=1; fi
# Architectures plug in behind ServableModel: outside model_loader/architectures/, only the
# registry that lists them includes an architecture's header, so the worker, the engines and
# generation see the interface alone. Each architecture file builds on that interface.
hits=$(grep -rnE '#include "model_loader/architectures/' "$root/model_loader" "$root/receiver" "$root/worker" "$root/trainer_sdk" \
  --include='*.hpp' --include='*.cpp' | grep -vE '^[^:]*model_loader/(architectures/|architecture_registry\.cpp:)')
if [ -n "$hits" ]; then echo "layering: only model_loader/architecture_registry.cpp may include an architecture (everything else uses ServableModel):"; echo "$hits"; status=1; fi
# The shared blocks serve every family: none of them knows one.
hits=$(grep -rnE '#include "model_loader/architectures/' "$root/model_loader/blocks" --include='*.hpp' --include='*.cpp' 2>/dev/null)
if [ -n "$hits" ]; then echo "layering: model_loader/blocks/ must not include an architecture:"; echo "$hits"; status=1; fi
for file in "$root"/model_loader/architectures/*_model.hpp; do
  [ -e "$file" ] || continue
  if ! grep -q '#include "model_loader/servable_runtime.hpp"' "$file"; then
    echo "layering: $file must build on model_loader/servable_runtime.hpp"; status=1
  fi
done
# Reading config.json and laying out a checkpoint need no model code: the registry, the config,
# the weight mapping and each family's rules stay free of libtorch (the fuzz targets build them
# without it).
hits=$(grep -nE '#include [<"](torch/|ATen/|c10/|model_loader/servable_model\.hpp|model_loader/architectures/[a-z0-9_]*_model\.hpp)' \
  "$root"/model_loader/model_config.* "$root"/model_loader/architecture_registry.* \
  "$root"/model_loader/weight_mapping.* "$root"/model_loader/architectures/*_family.* 2>/dev/null)
if [ -n "$hits" ]; then echo "layering: config.json and the architecture registry must stay free of libtorch and model code:"; echo "$hits"; status=1; fi
# CUDA lives in transport/ and in model_loader/kernels/ (FlashInfer's kernels, behind an
# interface with no CUDA type): everywhere else a GPU feature is a call into one of them that
# answers "needs a GPU build" without CUDA, never a conditional or a CUDA header. (bench/ and
# tests/ may ask: a GPU benchmark or test exists only in a GPU build.)
for folder in protocol model_loader receiver worker trainer_sdk; do
  hits=$(grep -rnE 'HOTSWAP_WITH_CUDA|#include [<"](cuda|cuda_runtime|cuda_runtime_api|nccl)\.h|#include "transport/(cuda_check|cuda_stream)\.hpp' \
    "$root/$folder" --include='*.hpp' --include='*.cpp' --include='*.h' 2>/dev/null |
    grep -v "^$root/model_loader/kernels/")
  if [ -n "$hits" ]; then
    echo "layering: $folder/ must leave CUDA to transport/ (no HOTSWAP_WITH_CUDA, no CUDA headers):"
    echo "$hits"
    status=1
  fi
done
# The kernels' interface holds no CUDA type, so that any g++ source may include it.
hits=$(grep -nE '#include [<"](cuda|flashinfer/)' "$root/model_loader/kernels/"*.hpp 2>/dev/null)
if [ -n "$hits" ]; then echo "layering: model_loader/kernels/'s headers must not include CUDA or FlashInfer:"; echo "$hits"; status=1; fi
[ $status -eq 0 ] && echo "layering: every dependency arrow holds"
exit $status
