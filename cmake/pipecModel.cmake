# pipec_add_model(): a model file compiled by pipec into per-rank programs built by this project's
# own toolchain (docs/build-integration.md). Included by pipecConfig.cmake.
#
#   pipec_add_model(NAME MODEL.json
#                   [STAGES S]              pipeline stages, one rank program each (default 1)
#                   [SCHEDULE X]            gpipe, 1f1b, interleaved, zb-h1 (pipec --schedule)
#                   [MICROBATCHES M]        pipec --microbatches
#                   [TARGET cpu|cuda]       pipec --target (cuda: enable the CUDA language first)
#                   [OUTPUT_DIRECTORY DIR]  default ${CMAKE_CURRENT_BINARY_DIR}/NAME
#                   [OPTIONS ...])          more pipec options (-D L=2, --set steps=10, ...)
#
# adds
#   - a custom command running `pipec compile MODEL --no-build --depfile` into DIR: its outputs
#     are DIR/rank<r>.c (.cu), DIR/launch.sh and DIR/pipec-manifest.json; it depends on the model
#     (and the pipec executable), and through the depfile on every file pipec read: editing the
#     model reruns it, nothing else does (the depfile only where the paths are plain enough for
#     CMake to read it back, see below);
#   - executables NAME_rank0 .. NAME_rank<S-1>, one per generated source, written to
#     DIR/bin/rank<r> (where DIR/launch.sh runs them: under mpirun at S > 1), compiled and linked by
#     this project's toolchain and flags (CMAKE_C_FLAGS, build type, sanitizers, install rules)
#     with pipec::pipert (and pipec::pipert_mpi at S > 1, the CUDA runtime for cuda), plus
#     -ffp-contract=off (the numbers of pipec's own builds);
#   - a target NAME_sources that runs the command (every rank program depends on it), and a
#     target NAME (ALL) that builds the programs, with the properties PIPEC_OUTPUT_DIRECTORY,
#     PIPEC_LAUNCH (DIR/launch.sh) and PIPEC_RANK_TARGETS.
# The policies of the function are this file's (CMP0116: depfile paths as Ninja needs them).
cmake_policy(PUSH)
cmake_policy(VERSION 3.20)
if(POLICY CMP0116)
  cmake_policy(SET CMP0116 NEW)
endif()

function(pipec_add_model name model)
  cmake_parse_arguments(PARSE_ARGV 2 arg ""
    "STAGES;SCHEDULE;MICROBATCHES;TARGET;OUTPUT_DIRECTORY" "OPTIONS")
  set(where "pipec_add_model(${name})")
  if(arg_UNPARSED_ARGUMENTS)
    message(FATAL_ERROR "${where}: unknown arguments: ${arg_UNPARSED_ARGUMENTS}")
  endif()
  if(TARGET ${name} OR TARGET ${name}_sources)
    message(FATAL_ERROR "${where}: a target named ${name} or ${name}_sources exists already")
  endif()
  if(NOT DEFINED arg_STAGES)
    set(arg_STAGES 1)
  endif()
  if(NOT arg_STAGES MATCHES "^[1-9][0-9]*$")
    message(FATAL_ERROR "${where}: STAGES must be a number of stages from 1, got '${arg_STAGES}'")
  endif()
  if(NOT DEFINED arg_TARGET)
    set(arg_TARGET cpu)
  endif()
  if(NOT arg_TARGET MATCHES "^(cpu|cuda)$")
    message(FATAL_ERROR "${where}: TARGET must be cpu or cuda, got '${arg_TARGET}'")
  endif()
  get_filename_component(model "${model}" ABSOLUTE BASE_DIR "${CMAKE_CURRENT_SOURCE_DIR}")
  if(NOT EXISTS "${model}")
    message(FATAL_ERROR "${where}: no model file ${model}")
  endif()
  if(DEFINED arg_OUTPUT_DIRECTORY)
    get_filename_component(out "${arg_OUTPUT_DIRECTORY}" ABSOLUTE
      BASE_DIR "${CMAKE_CURRENT_BINARY_DIR}")
  else()
    set(out "${CMAKE_CURRENT_BINARY_DIR}/${name}")
  endif()

  # The runtime each rank links, and the language of its source.
  set(native OFF)
  if("--march=native" IN_LIST arg_OPTIONS)
    set(native ON)
  endif()
  if(native)
    set(libs pipec::pipert-native)
  else()
    set(libs pipec::pipert)
  endif()
  set(ext c)
  if(arg_TARGET STREQUAL "cuda")
    set(ext cu)
    get_property(langs GLOBAL PROPERTY ENABLED_LANGUAGES)
    if(NOT pipec_HAVE_CUDA OR NOT TARGET pipec::pipert_cuda)
      message(FATAL_ERROR "${where}: TARGET cuda: this pipec was built without the CUDA toolkit")
    elseif(NOT "CUDA" IN_LIST langs)
      message(FATAL_ERROR "${where}: TARGET cuda: enable the CUDA language first "
        "(project(... LANGUAGES C CUDA) or enable_language(CUDA))")
    elseif(NOT TARGET CUDA::cublas)
      message(FATAL_ERROR "${where}: TARGET cuda: the CUDA toolkit's cuBLAS was not found "
        "(find_package(CUDAToolkit))")
    endif()
    list(PREPEND libs pipec::pipert_cuda)
  endif()
  if(arg_STAGES GREATER 1)
    if(NOT pipec_HAVE_MPI OR NOT TARGET pipec::pipert_mpi)
      message(FATAL_ERROR "${where}: STAGES ${arg_STAGES}: the rank programs need Open MPI, "
        "which this pipec was built without")
    elseif(NOT TARGET PkgConfig::OMPI)
      message(FATAL_ERROR "${where}: STAGES ${arg_STAGES}: Open MPI (pkg-config ompi-c) not "
        "found: apt-get install libopenmpi-dev openmpi-bin")
    endif()
    list(PREPEND libs pipec::pipert_mpi)
  endif()

  # The depfile where CMake reads it back: Ninja and Makefile generators, and paths of letters,
  # digits and "_./+,@!{} ~-" only: pipec refuses the paths a depfile cannot hold (';', '(', '\',
  # ...: docs/build-integration.md), and CMake (3.25) mangles the '#', '$' and ':' that make and
  # ninja read back (Ninja generator: pipec reruns at every build; ':', Makefiles too: never).
  # Nothing is lost without it today: the model, pipec's one input, is in DEPENDS.
  set(depfile "")
  if(CMAKE_GENERATOR MATCHES "Ninja|Makefiles" AND
     "${model}${out}" MATCHES "^[A-Za-z0-9_./+,@!{} ~-]*$")
    set(depfile DEPFILE "${out}/pipec.d")
  endif()
  # pipec compile --no-build: the sources, launch.sh, the manifest (in this order: the depfile's).
  set(cmd compile "${model}" --no-build -o "${out}")
  if(depfile)
    list(APPEND cmd --depfile "${out}/pipec.d")
  endif()
  list(APPEND cmd --stages ${arg_STAGES} --target ${arg_TARGET})
  if(DEFINED arg_SCHEDULE)
    list(APPEND cmd --schedule ${arg_SCHEDULE})
  endif()
  if(DEFINED arg_MICROBATCHES)
    list(APPEND cmd --microbatches ${arg_MICROBATCHES})
  endif()
  list(APPEND cmd ${arg_OPTIONS})
  set(sources "")
  math(EXPR last "${arg_STAGES} - 1")
  foreach(r RANGE 0 ${last})
    list(APPEND sources "${out}/rank${r}.${ext}")
  endforeach()
  get_filename_component(model_name "${model}" NAME)
  add_custom_command(
    OUTPUT ${sources} "${out}/launch.sh" "${out}/pipec-manifest.json"
    COMMAND pipec::pipec ${cmd}
    DEPENDS "${model}" pipec::pipec
    ${depfile}
    COMMENT "pipec: ${name}: compiling ${model_name} (${arg_STAGES} stage(s), ${arg_TARGET})"
    VERBATIM)

  # One target drives the command and every rank waits for it: with the sources in several
  # targets alone, Makefile generators would run pipec once per target, side by side (-j).
  add_custom_target(${name}_sources DEPENDS ${sources} "${out}/launch.sh"
    "${out}/pipec-manifest.json")

  set(ranks "")
  foreach(r RANGE 0 ${last})
    set(exe ${name}_rank${r})
    add_executable(${exe} "${out}/rank${r}.${ext}")
    add_dependencies(${exe} ${name}_sources)
    # $<1:...>: the directory as it is, without a per-configuration subdirectory.
    set_target_properties(${exe} PROPERTIES OUTPUT_NAME rank${r}
      RUNTIME_OUTPUT_DIRECTORY "$<1:${out}/bin>" C_STANDARD 11 C_EXTENSIONS ON)
    if(arg_TARGET STREQUAL "cuda")
      set(archs ${pipec_CUDA_ARCHITECTURES})
      set(next OFF)
      foreach(opt IN LISTS arg_OPTIONS) # --cuda-arch 80,90 or --cuda-arch=80,90, as pipec takes it
        if(next)
          string(REPLACE "," ";" archs "${opt}")
        elseif(opt MATCHES "^--cuda-arch=(.*)$")
          string(REPLACE "," ";" archs "${CMAKE_MATCH_1}")
        endif()
        set(next OFF)
        if(opt STREQUAL "--cuda-arch")
          set(next ON)
        endif()
      endforeach()
      set_target_properties(${exe} PROPERTIES CUDA_STANDARD 17 CUDA_ARCHITECTURES "${archs}")
    else()
      target_compile_options(${exe} PRIVATE -ffp-contract=off)
      if(native)
        target_compile_options(${exe} PRIVATE -march=native)
      endif()
    endif()
    target_link_libraries(${exe} PRIVATE ${libs})
    list(APPEND ranks ${exe})
  endforeach()
  add_custom_target(${name} ALL)
  add_dependencies(${name} ${ranks})
  set_target_properties(${name} PROPERTIES PIPEC_OUTPUT_DIRECTORY "${out}"
    PIPEC_LAUNCH "${out}/launch.sh" PIPEC_RANK_TARGETS "${ranks}")
endfunction()

cmake_policy(POP)
