# One place for the warning flags every hotswap target uses.
add_library(hotswap_warnings INTERFACE)
target_compile_options(hotswap_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor>)
if(HOTSWAP_WERROR)
  target_compile_options(hotswap_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()

# HOTSWAP_SANITIZE=ON builds every target with AddressSanitizer and UndefinedBehaviorSanitizer
# (scripts/test.sh --sanitize). UBSan's vptr check is left out: libtorch's classes are compiled
# without it, and their type info spans several shared libraries.
option(HOTSWAP_SANITIZE "Build with AddressSanitizer and UndefinedBehaviorSanitizer" OFF)
if(HOTSWAP_SANITIZE)
  set(_hotswap_sanitize -fsanitize=address,undefined -fno-sanitize=vptr
                        -fno-sanitize-recover=undefined -fno-omit-frame-pointer)
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${_hotswap_sanitize}>")
  add_link_options(${_hotswap_sanitize})
  message(STATUS "hotswap: sanitizers ON (address, undefined)")
endif()
