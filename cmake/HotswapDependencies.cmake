# Finds every dependency hotswap builds with: Debian's packages and the PyPI torch environment
# (scripts/install-deps.sh); the CUDA toolkit comes with the machine when it has one.

# --- libtorch -------------------------------------------------------------------------------
# PyTorch 2 from PyPI, the torch vLLM pins (scripts/python-requirements.txt), in the virtual
# environment scripts/make-torch-env.sh makes: CMake takes Torch_DIR from its python, which is
# also the python the `hotswap` package is built for and the interop tests' peers run in. An
# explicit Torch_DIR (or CMAKE_PREFIX_PATH) still wins, provided it is torch 2.
if(DEFINED ENV{HOTSWAP_VENV})
  set(_hotswap_venv "$ENV{HOTSWAP_VENV}")
else()
  set(_hotswap_venv "$ENV{HOME}/.cache/hotswap/venv")  # make-torch-env.sh's default
endif()
if(EXISTS "${_hotswap_venv}/bin/python")
  set(_hotswap_torch_python_default "${_hotswap_venv}/bin/python")
else()
  set(_hotswap_torch_python_default python3)
endif()
set(HOTSWAP_TORCH_PYTHON "${_hotswap_torch_python_default}" CACHE STRING
    "python whose torch (torch.utils.cmake_prefix_path) hotswap builds against")
# What an earlier configure cached about a torch that is gone (Debian's libtorch uninstalled,
# an environment remade) is forgotten, not reused: TorchConfig's find_library calls keep a cached
# path (seen: libc10.so of the uninstalled libtorch, "no rule to make target").
if(Torch_DIR AND NOT EXISTS "${Torch_DIR}/TorchConfig.cmake")
  message(STATUS "hotswap: forgetting Torch_DIR=${Torch_DIR} (no TorchConfig.cmake there now)")
  unset(Torch_DIR CACHE)
  unset(Torch_DIR)
endif()
get_cmake_property(_hotswap_cached CACHE_VARIABLES)
foreach(_hotswap_var IN LISTS _hotswap_cached)
  if(_hotswap_var MATCHES "(_LIBRARY|_INCLUDE_DIR|_DIR)$" AND IS_ABSOLUTE "${${_hotswap_var}}"
     AND NOT EXISTS "${${_hotswap_var}}")
    unset(${_hotswap_var} CACHE)
  endif()
endforeach()
execute_process(
  COMMAND ${HOTSWAP_TORCH_PYTHON} -c
    "import os, sys, torch; p = torch.utils.cmake_prefix_path; print(sys.executable); print(torch.__version__); print(p if os.path.isfile(os.path.join(p, 'Torch', 'TorchConfig.cmake')) else '')"
  OUTPUT_VARIABLE _hotswap_torch OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
  RESULT_VARIABLE _hotswap_torch_rc)
set(HOTSWAP_TORCH_PYTHON_EXECUTABLE "")
if(_hotswap_torch_rc EQUAL 0)
  string(REPLACE "\n" ";" _hotswap_torch "${_hotswap_torch}")
  list(GET _hotswap_torch 0 HOTSWAP_TORCH_PYTHON_EXECUTABLE)
  list(GET _hotswap_torch 1 HOTSWAP_TORCH_PYTHON_VERSION)
  list(LENGTH _hotswap_torch _hotswap_torch_n)
  if(_hotswap_torch_n EQUAL 3 AND NOT Torch_DIR)
    list(GET _hotswap_torch 2 _hotswap_torch_prefix)
    message(STATUS "hotswap: torch ${HOTSWAP_TORCH_PYTHON_VERSION} of ${HOTSWAP_TORCH_PYTHON_EXECUTABLE}")
    list(PREPEND CMAKE_PREFIX_PATH "${_hotswap_torch_prefix}")
    # TorchConfig finds some of its libraries (c10) with PATHS, which CMake searches after the
    # system's: with another libtorch installed system-wide, libc10.so could come from it and
    # two c10s would share one process (heap corruption at exit, seen). Its own lib/ goes first.
    get_filename_component(_hotswap_torch_root "${_hotswap_torch_prefix}/../.." ABSOLUTE)
    list(PREPEND CMAKE_LIBRARY_PATH "${_hotswap_torch_root}/lib")
  endif()
endif()
# A CUDA torch's config enables CUDA, so it needs nvcc. A machine without one (no toolkit) gets
# the nvcc that scripts/make-torch-env.sh installed into the environment from PyPI, at torch's
# own CUDA version (site-packages/nvidia/cuNN, beside torch).
if(_hotswap_torch_root AND NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
   AND NOT CUDAToolkit_ROOT AND NOT DEFINED ENV{CUDAToolkit_ROOT})
  find_program(HOTSWAP_SYSTEM_NVCC nvcc PATHS /usr/local/cuda/bin)
  file(GLOB _hotswap_wheel_nvcc "${_hotswap_torch_root}/../nvidia/cu*/bin/nvcc")
  if(NOT HOTSWAP_SYSTEM_NVCC AND _hotswap_wheel_nvcc)
    list(GET _hotswap_wheel_nvcc 0 _hotswap_wheel_nvcc)
    get_filename_component(_hotswap_wheel_cuda "${_hotswap_wheel_nvcc}/../.." ABSOLUTE)
    message(STATUS "hotswap: no CUDA toolkit on this machine; CUDA from PyPI's wheels: ${_hotswap_wheel_cuda}")
    set(CMAKE_CUDA_COMPILER "${_hotswap_wheel_nvcc}")
    set(CUDAToolkit_ROOT "${_hotswap_wheel_cuda}")
    set(CUDA_TOOLKIT_ROOT_DIR "${_hotswap_wheel_cuda}")  # torch's legacy FindCUDA
  endif()
endif()
# A CUDA torch enables the CUDA language and gives it the C++ standard (20) unless one is set;
# cmake 3.25 has no C++20 flags for nvcc. hotswap compiles no CUDA sources, so 17 does.
# (Its two warnings, "library kineto not found" and "not compatible with
# CMAKE_CUDA_ARCHITECTURES", are torch's own and harmless here: no profiler, no kernels.)
if(NOT DEFINED CMAKE_CUDA_STANDARD)
  set(CMAKE_CUDA_STANDARD 17)
endif()
find_package(Torch)
if(NOT Torch_FOUND OR Torch_VERSION VERSION_LESS 2.0)
  message(FATAL_ERROR
    "hotswap builds against PyTorch 2 (found: "
    "${Torch_VERSION}${Torch_DIR}, from HOTSWAP_TORCH_PYTHON=${HOTSWAP_TORCH_PYTHON}). "
    "scripts/install-deps.sh makes the environment it needs (scripts/make-torch-env.sh); "
    "or pass -DHOTSWAP_TORCH_PYTHON=<a python with torch 2> or -DTorch_DIR=<its share/cmake/Torch>.")
endif()
# libtorch's CPU build runs at::parallel_for over OpenMP, but that template is compiled into its
# caller: a file built without -fopenmp gets the serial fallback and runs on one thread whatever
# at::get_num_threads() says. The libraries that call it link OpenMP::OpenMP_CXX (GCC's libgomp,
# the runtime torch's own libgomp.so.1 is one build of: the process loads one of them).
find_package(OpenMP REQUIRED COMPONENTS CXX)

# The python whose torch is this libtorch: the `hotswap` package is built for it, and the
# rendezvous and gloo interop tests' Python peers run in it (a c10d store speaks its own torch's
# protocol). Empty when Torch_DIR was given and belongs to no python we were told of.
set(HOTSWAP_STORE_PEER_PYTHON "")
if(HOTSWAP_TORCH_PYTHON_EXECUTABLE AND _hotswap_torch_n EQUAL 3)
  list(GET _hotswap_torch 2 _hotswap_peer_prefix)
  string(FIND "${Torch_DIR}" "${_hotswap_peer_prefix}" _hotswap_peer_at)
  if(_hotswap_peer_at EQUAL 0)
    set(HOTSWAP_STORE_PEER_PYTHON "${HOTSWAP_TORCH_PYTHON_EXECUTABLE}")
  endif()
endif()
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
# The tokenizer: PCRE2 for the split patterns' Unicode classes and lookahead, ICU for NFC.
find_package(PkgConfig REQUIRED)
pkg_check_modules(PCRE2 REQUIRED IMPORTED_TARGET libpcre2-8)
find_package(ICU 60 REQUIRED COMPONENTS uc)
# Boost: Asio and Beast (headers only) for the worker's HTTP server; Boost.Test for the suites.
if(HOTSWAP_BUILD_TESTS)
  find_package(Boost 1.74 REQUIRED COMPONENTS unit_test_framework)
else()
  find_package(Boost 1.74 REQUIRED)
endif()
if(HOTSWAP_BUILD_BENCH)
  # Only the planning micro-benchmark uses it; a machine without it (the GPU machine) skips that.
  find_package(benchmark QUIET)
endif()

# --- CUDA and NCCL (optional) ---------------------------------------------------------------
# HOTSWAP_WITH_CUDA defaults to ON exactly when a CUDA toolkit and NCCL are both found. GPU code
# is plain C++ against the CUDA runtime and NCCL C APIs, so no GPU is needed to compile it.
find_package(CUDAToolkit QUIET)
# A CUDA torch from pip needs the NCCL it ships with (nvidia-nccl-*): torch 2.14's libtorch_cuda
# calls functions that CUDA 13's own NCCL 2.28 lacks, so linking the toolkit's copy breaks the
# link. Prefer the wheel's, so that one NCCL is loaded and it is the one torch was built for.
if(HOTSWAP_TORCH_HAS_CUDA AND HOTSWAP_STORE_PEER_PYTHON)
  execute_process(
    COMMAND ${HOTSWAP_STORE_PEER_PYTHON} -c "import nvidia.nccl; print(list(nvidia.nccl.__path__)[0])"
    OUTPUT_VARIABLE _hotswap_wheel_nccl OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET
    RESULT_VARIABLE _hotswap_wheel_nccl_rc)
  # Forced over whatever an earlier configure cached (the toolkit's copy, seen in a build
  # directory configured before the move to this torch).
  if(_hotswap_wheel_nccl_rc EQUAL 0 AND EXISTS "${_hotswap_wheel_nccl}/include/nccl.h")
    set(NCCL_INCLUDE_DIR "${_hotswap_wheel_nccl}/include" CACHE PATH "nccl.h of torch's NCCL" FORCE)
    file(GLOB _hotswap_wheel_nccl_lib "${_hotswap_wheel_nccl}/lib/libnccl.so*")
    list(GET _hotswap_wheel_nccl_lib 0 _hotswap_wheel_nccl_lib)
    set(NCCL_LIBRARY "${_hotswap_wheel_nccl_lib}" CACHE FILEPATH "torch's NCCL" FORCE)
  endif()
endif()
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
# FlashInfer's header-only CUDA templates, from the flashinfer-python wheel that
# scripts/make-torch-env.sh installs beside torch (scripts/flashinfer-requirements.txt), and the
# CCCL they were written against (CUDA 13.0's lacks cuda::fast_mod_div): model_loader/kernels/
# compiles the instantiations hotswap uses. A sanitized build leaves them out: nothing in it runs
# on a GPU, and the CPU paths it checks do not call them.
get_filename_component(_hotswap_site_packages "${Torch_DIR}/../../../.." ABSOLUTE)
find_path(HOTSWAP_FLASHINFER_INCLUDE_DIR flashinfer/attention/decode.cuh
  HINTS "${_hotswap_site_packages}/flashinfer/data/include" NO_DEFAULT_PATH)
if(HOTSWAP_FLASHINFER_INCLUDE_DIR)
  get_filename_component(HOTSWAP_FLASHINFER_CCCL_DIR "${HOTSWAP_FLASHINFER_INCLUDE_DIR}/../cccl"
                         ABSOLUTE)
endif()
# HOTSWAP_WITH_KERNELS: AUTO (the default) builds them wherever they can be, decided afresh at
# every configure, so a build folder configured before the headers were installed picks them up.
set(HOTSWAP_WITH_KERNELS AUTO CACHE STRING "Compile FlashInfer's GPU kernels: AUTO, ON or OFF")
set_property(CACHE HOTSWAP_WITH_KERNELS PROPERTY STRINGS AUTO ON OFF)
set(HOTSWAP_KERNELS_REASON "")
if(NOT HOTSWAP_WITH_CUDA)
  set(HOTSWAP_KERNELS_REASON "no GPU build (${HOTSWAP_CUDA_REASON})")
elseif(NOT HOTSWAP_FLASHINFER_INCLUDE_DIR OR NOT EXISTS "${HOTSWAP_FLASHINFER_CCCL_DIR}/cub")
  set(HOTSWAP_KERNELS_REASON "FlashInfer's headers not found beside torch (scripts/make-torch-env.sh installs them)")
elseif(NOT CMAKE_CUDA_COMPILER)
  set(HOTSWAP_KERNELS_REASON "no nvcc")
elseif(HOTSWAP_SANITIZE AND HOTSWAP_WITH_KERNELS STREQUAL "AUTO")
  set(HOTSWAP_KERNELS_REASON "a sanitized build runs nothing on a GPU")
endif()
if(HOTSWAP_WITH_KERNELS STREQUAL "OFF")
  set(HOTSWAP_KERNELS_REASON "HOTSWAP_WITH_KERNELS=OFF was asked for")
elseif(HOTSWAP_WITH_KERNELS STREQUAL "ON" AND NOT HOTSWAP_KERNELS_REASON STREQUAL "")
  message(FATAL_ERROR "HOTSWAP_WITH_KERNELS=ON, but ${HOTSWAP_KERNELS_REASON}")
endif()
if(HOTSWAP_KERNELS_REASON STREQUAL "")
  set(HOTSWAP_KERNELS_BUILT ON)
else()
  set(HOTSWAP_KERNELS_BUILT OFF)
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
