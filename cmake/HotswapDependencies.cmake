# Finds every dependency hotswap builds with. All come from Debian's packages (see
# scripts/install-deps.sh); CUDA and NCCL come with the machine when it has them.

# --- libtorch -------------------------------------------------------------------------------
# Order: an explicit Torch_DIR (or CMAKE_PREFIX_PATH), else the torch of HOTSWAP_TORCH_PYTHON
# (a pip torch with CUDA on GPU machines), else Debian's libtorch-dev (1.13, CPU only).
set(HOTSWAP_TORCH_PYTHON "python3" CACHE STRING
    "python whose torch.utils.cmake_prefix_path is tried before the system libtorch; OFF to skip")
if(NOT Torch_DIR AND NOT HOTSWAP_TORCH_PYTHON STREQUAL "OFF")
  execute_process(
    COMMAND ${HOTSWAP_TORCH_PYTHON} -c
      "import os, torch; p = torch.utils.cmake_prefix_path; print(p if os.path.isfile(os.path.join(p, 'Torch', 'TorchConfig.cmake')) else '')"
    OUTPUT_VARIABLE _hotswap_torch_prefix
    OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
    RESULT_VARIABLE _hotswap_torch_rc)
  if(_hotswap_torch_rc EQUAL 0 AND _hotswap_torch_prefix)
    message(STATUS "hotswap: using the torch of ${HOTSWAP_TORCH_PYTHON}: ${_hotswap_torch_prefix}")
    list(PREPEND CMAKE_PREFIX_PATH "${_hotswap_torch_prefix}")
  endif()
endif()
find_package(Torch REQUIRED)
if(TARGET torch_cuda OR TARGET c10_cuda)
  set(HOTSWAP_TORCH_HAS_CUDA ON)
else()
  set(HOTSWAP_TORCH_HAS_CUDA OFF)
endif()

# --- control plane, JSON, crypto, tests -----------------------------------------------------
find_package(nlohmann_json 3.10 REQUIRED)
find_package(cppzmq REQUIRED)
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
find_package(Threads REQUIRED)
if(HOTSWAP_BUILD_TESTS)
  find_package(Boost 1.74 REQUIRED COMPONENTS unit_test_framework)
endif()
if(HOTSWAP_BUILD_BENCH)
  # Only the planning micro-benchmark uses it; a machine without it (the GPU machine) skips that.
  find_package(benchmark QUIET)
endif()

# --- CUDA and NCCL (optional) ---------------------------------------------------------------
# HOTSWAP_WITH_CUDA defaults to ON exactly when a CUDA toolkit and NCCL are both found. GPU code
# is plain C++ against the CUDA runtime and NCCL C APIs, so no GPU is needed to compile it.
find_package(CUDAToolkit QUIET)
find_path(NCCL_INCLUDE_DIR nccl.h
  HINTS ${CUDAToolkit_INCLUDE_DIRS} ENV NCCL_HOME ENV CUDA_HOME PATH_SUFFIXES include)
find_library(NCCL_LIBRARY NAMES nccl libnccl.so.2
  HINTS ${CUDAToolkit_LIBRARY_DIR} ENV NCCL_HOME ENV CUDA_HOME PATH_SUFFIXES lib lib64)
if(CUDAToolkit_FOUND AND NCCL_INCLUDE_DIR AND NCCL_LIBRARY)
  set(_hotswap_cuda_default ON)
  set(HOTSWAP_CUDA_REASON "")
elseif(NOT CUDAToolkit_FOUND)
  set(_hotswap_cuda_default OFF)
  set(HOTSWAP_CUDA_REASON "no CUDA toolkit found")
else()
  set(_hotswap_cuda_default OFF)
  set(HOTSWAP_CUDA_REASON "CUDA ${CUDAToolkit_VERSION} found but no NCCL (nccl.h / libnccl)")
endif()
option(HOTSWAP_WITH_CUDA "Build the GPU data planes (nccl, sparse_nccl, ipc)" ${_hotswap_cuda_default})
if(NOT HOTSWAP_WITH_CUDA AND HOTSWAP_CUDA_REASON STREQUAL "")
  set(HOTSWAP_CUDA_REASON "HOTSWAP_WITH_CUDA=OFF was asked for")
endif()
if(HOTSWAP_WITH_CUDA)
  if(NOT CUDAToolkit_FOUND OR NOT NCCL_INCLUDE_DIR OR NOT NCCL_LIBRARY)
    message(FATAL_ERROR "HOTSWAP_WITH_CUDA=ON but ${HOTSWAP_CUDA_REASON}")
  endif()
  if(NOT TARGET NCCL::nccl)
    add_library(NCCL::nccl UNKNOWN IMPORTED)
    set_target_properties(NCCL::nccl PROPERTIES
      IMPORTED_LOCATION "${NCCL_LIBRARY}" INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
  endif()
endif()
