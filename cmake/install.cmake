# `cmake --install` puts the cadre binary, the libraries, the headers and a CMake package in
# the prefix, so another project does find_package(Cadre) and links Cadre::cadre.
#   <prefix>/bin/cadre
#   <prefix>/lib/libcadre_*.a, libcadre_spm.so
#   <prefix>/include/cadre/cadre.h and <folder>/*.h (the headers keep src/'s layout)
#   <prefix>/lib/cmake/Cadre/{CadreConfig,CadreConfigVersion,CadreTargets}.cmake
include(CMakePackageConfigHelpers)

# What a program that trains its own module links: everything but the launcher and the CLI.
set(CADRE_LIBRARY_TARGETS cadre_core cadre_membership cadre_device cadre_obs cadre_store cadre_comm cadre_optim cadre_shard cadre_pipeline cadre_data cadre_ckpt
                          cadre_models cadre_train)
add_library(cadre_library INTERFACE)
target_link_libraries(cadre_library INTERFACE ${CADRE_LIBRARY_TARGETS})
target_include_directories(cadre_library INTERFACE $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
set_target_properties(cadre_library PROPERTIES EXPORT_NAME cadre)

install(TARGETS cadre RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS cadre_spm LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS cadre_library cadre_torch cadre_openmp ${CADRE_LIBRARY_TARGETS} EXPORT CadreTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/src/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cadre
        FILES_MATCHING PATTERN "*.h" PATTERN "pch" EXCLUDE)
install(FILES ${PROJECT_SOURCE_DIR}/include/cadre/cadre.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/cadre)
install(EXPORT CadreTargets NAMESPACE Cadre:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Cadre)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/CadreConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/CadreConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Cadre)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/CadreConfigVersion.cmake VERSION 0.3.0
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/CadreConfig.cmake ${PROJECT_BINARY_DIR}/CadreConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/Cadre)
