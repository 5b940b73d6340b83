# One place for the warning flags every hotswap target uses.
add_library(hotswap_warnings INTERFACE)
target_compile_options(hotswap_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow=local -Wnon-virtual-dtor>)
if(HOTSWAP_WERROR)
  target_compile_options(hotswap_warnings INTERFACE $<$<COMPILE_LANGUAGE:CXX>:-Werror>)
endif()
