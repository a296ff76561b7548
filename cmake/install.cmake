# Installation: `make install PREFIX=...` (the Makefile wraps `cmake --install build --prefix
# PREFIX`; DESTDIR stages it). The layout (docs/build-integration.md), relative to the prefix:
#   bin/pipec                          the compiler; it finds the runtime under its own prefix
#                                      (codegen/runtime_paths.c), so a moved prefix still works
#   lib/libpipert.a, libpipert-native.a, libpipert_mpi.a (with Open MPI), libpipert_cuda.a and
#   libpipert_nccl.a (with the CUDA toolkit, NCCL)
#   include/pipec/pipert.h, comm.h,    what generated programs include (cuda/pipert_cuda.h: .cu)
#   trace.h
#   lib/cmake/pipec/                   the CMake package: pipecConfig.cmake (+ version file), the
#                                      imported targets pipec::pipec, pipec::pipert, ... and
#                                      pipecModel.cmake (pipec_add_model)
#   lib/pkgconfig/pipert.pc            pkg-config (and pipert-mpi.pc for rank programs at S > 1)
#   share/pipec/docs, share/pipec/samples (samples/cmake: a project that uses the package)
# Every path the package and the .pc files hold is relative to where they lie: relocatable.
include(CMakePackageConfigHelpers)

set(PIPEC_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/pipec)
set(PIPEC_INSTALL_INCDIR ${CMAKE_INSTALL_INCLUDEDIR}/pipec)
set(PIPEC_INSTALL_DATADIR ${CMAKE_INSTALL_DATADIR}/pipec)

set(pipec_runtime_targets pipert pipert-native)
foreach(t pipert_mpi pipert_cuda pipert_nccl)
  if(TARGET ${t})
    list(APPEND pipec_runtime_targets ${t})
  endif()
endforeach()
# A sanitized runtime needs sanitized programs (as pipec's own builds link them).
if(PIPEC_SANITIZE)
  foreach(t pipert pipert-native)
    target_link_options(${t} INTERFACE "$<INSTALL_INTERFACE:-fsanitize=address,undefined>")
  endforeach()
endif()

install(TARGETS pipec EXPORT pipecTargets RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${pipec_runtime_targets} EXPORT pipecTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR})
# The headers a generated program includes: pipert.h and what it includes; the CUDA program's.
install(FILES runtime/pipert.h runtime/comm.h runtime/trace.h DESTINATION ${PIPEC_INSTALL_INCDIR})
if(PIPEC_CUDA)
  install(FILES runtime/cuda/pipert_cuda.h DESTINATION ${PIPEC_INSTALL_INCDIR}/cuda)
endif()

install(EXPORT pipecTargets NAMESPACE pipec:: DESTINATION ${PIPEC_INSTALL_CMAKEDIR}
  FILE pipecTargets.cmake)
# What the package must know of this build: which runtimes exist, the CUDA architectures.
if(TARGET pipert_mpi)
  set(PIPEC_HAVE_MPI ON)
else()
  set(PIPEC_HAVE_MPI OFF)
endif()
configure_package_config_file(cmake/pipecConfig.cmake.in ${CMAKE_BINARY_DIR}/pipecConfig.cmake
  INSTALL_DESTINATION ${PIPEC_INSTALL_CMAKEDIR}
  PATH_VARS PIPEC_INSTALL_INCDIR PIPEC_INSTALL_DATADIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/pipecConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/pipecConfig.cmake ${CMAKE_BINARY_DIR}/pipecConfigVersion.cmake
  cmake/pipecModel.cmake DESTINATION ${PIPEC_INSTALL_CMAKEDIR})

# pkg-config: the prefix is found from the .pc file's own directory (${pcfiledir}).
file(RELATIVE_PATH PIPEC_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
string(JOIN " " PIPEC_PC_LIBS ${OpenMP_C_FLAGS} -lm)
if(PIPEC_SANITIZE)
  string(PREPEND PIPEC_PC_LIBS "-fsanitize=address,undefined ")
endif()
configure_file(cmake/pipert.pc.in ${CMAKE_BINARY_DIR}/pipert.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/pipert.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
if(TARGET pipert_mpi)
  configure_file(cmake/pipert-mpi.pc.in ${CMAKE_BINARY_DIR}/pipert-mpi.pc @ONLY)
  install(FILES ${CMAKE_BINARY_DIR}/pipert-mpi.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
endif()

install(FILES README.md DESTINATION ${PIPEC_INSTALL_DATADIR})
install(DIRECTORY docs/ DESTINATION ${PIPEC_INSTALL_DATADIR}/docs)
install(DIRECTORY samples/ DESTINATION ${PIPEC_INSTALL_DATADIR}/samples USE_SOURCE_PERMISSIONS
  PATTERN __pycache__ EXCLUDE)
