# The installable package: `cmake --install` puts the libraries, public headers, programs and a
# hotswapConfig.cmake under the prefix, so that another project can write
#   find_package(hotswap REQUIRED)
#   target_link_libraries(my_trainer PRIVATE hotswap::trainer_sdk)
# The same hotswap::<component> names are alias targets inside this build.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(HOTSWAP_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/hotswap")
# Installed programs find hotswap's libraries beside them, and libtorch where it was linked from.
set(CMAKE_INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
set(CMAKE_INSTALL_RPATH_USE_LINK_PATH ON)

# A library of the package: hotswap::<component> here and once installed. Installed, its headers
# are included as <hotswap/<component>/<file>.hpp> (HotswapInstallHeaders.cmake); in this tree,
# as "<component>/<file>.hpp".
function(hotswap_package_library target component)
  add_library(hotswap::${component} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${component})
  target_include_directories(${target} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  install(TARGETS ${target} EXPORT hotswapTargets
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
    ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(CODE "
    set(HOTSWAP_HEADER_SOURCE \"${PROJECT_SOURCE_DIR}/${component}\")
    set(HOTSWAP_HEADER_STAGING \"${PROJECT_BINARY_DIR}/installed-headers/${component}\")
    set(HOTSWAP_HEADER_DESTINATION
        \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/hotswap/${component}\")
    include(\"${PROJECT_SOURCE_DIR}/cmake/HotswapInstallHeaders.cmake\")")
endfunction()

# Called once every target exists (from the top-level CMakeLists.txt).
function(hotswap_install_package)
  # The warning flags travel with static libraries' link interfaces; harmless when shared.
  install(TARGETS hotswap_warnings EXPORT hotswapTargets)
  install(TARGETS hotswap_jinja hotswap_worker_serving hotswap_worker hotswap_worker_frontends
    LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
  install(TARGETS hotswap-worker hotswap-launch hotswap-trainer hotswap-make-model
                  hotswap-generate
    RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
  install(EXPORT hotswapTargets NAMESPACE hotswap:: DESTINATION ${HOTSWAP_INSTALL_CMAKEDIR})
  configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/hotswapConfig.cmake.in
    ${PROJECT_BINARY_DIR}/hotswapConfig.cmake INSTALL_DESTINATION ${HOTSWAP_INSTALL_CMAKEDIR})
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/hotswapConfigVersion.cmake
    COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/hotswapConfig.cmake
                ${PROJECT_BINARY_DIR}/hotswapConfigVersion.cmake
    DESTINATION ${HOTSWAP_INSTALL_CMAKEDIR})
endfunction()
