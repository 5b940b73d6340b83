# Run by `cmake --install` (install(CODE) in HotswapInstall.cmake) for one component: installs
# its public headers under <prefix>/include/hotswap/<component>/, each of hotswap's own includes
# rewritten from the in-tree "<component>/x.hpp" to <hotswap/<component>/x.hpp>. A consumer
# then has one name, hotswap/, on its include path (as torch/, c10/ and gloo/ are), and the
# source tree keeps its short includes. Inputs: HOTSWAP_HEADER_SOURCE (the component's folder),
# HOTSWAP_HEADER_STAGING (a build-tree folder), HOTSWAP_HEADER_DESTINATION (under the prefix).
file(GLOB_RECURSE headers RELATIVE "${HOTSWAP_HEADER_SOURCE}" "${HOTSWAP_HEADER_SOURCE}/*.hpp")
file(REMOVE_RECURSE "${HOTSWAP_HEADER_STAGING}")
foreach(header IN LISTS headers)
  if(header MATCHES "^(tools|python)/")
    continue()  # programs and Python bindings: not part of the C++ interface
  endif()
  file(READ "${HOTSWAP_HEADER_SOURCE}/${header}" text)
  string(REGEX REPLACE
    "#include \"((protocol|transport|model_loader|receiver|trainer_sdk|worker)/[^\"]*)\""
    "#include <hotswap/\\1>" text "${text}")
  get_filename_component(folder "${header}" DIRECTORY)
  file(WRITE "${HOTSWAP_HEADER_STAGING}/${header}" "${text}")
  # file(INSTALL) honours DESTDIR and records each file in install_manifest.txt.
  file(INSTALL "${HOTSWAP_HEADER_STAGING}/${header}"
    DESTINATION "${HOTSWAP_HEADER_DESTINATION}/${folder}")
endforeach()
