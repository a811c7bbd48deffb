# --launcher mpi (optional): found -> target zob_mpi (the MPI collectives and launcher, linked
# into the executable only, so zob_core and its tests never need MPI); missing -> one notice,
# and --launcher mpi exits 2 saying the build has no MPI.
set(ZOB_MPI "AUTO" CACHE STRING "Build --launcher mpi: AUTO (if MPI is found), ON, OFF")
set(ZOB_HAVE_MPI OFF)
if(ZOB_SANITIZE AND NOT ZOB_MPI STREQUAL "ON")
  # OpenMPI keeps allocations to the end of the process, which LeakSanitizer reports in every
  # rank; the sanitizer presets test the rest without it.
  message(STATUS "zob: sanitizer build - building without --launcher mpi (ZOB_MPI=ON forces it)")
elseif(NOT ZOB_MPI STREQUAL "OFF")
  find_package(MPI COMPONENTS C QUIET)
  if(MPI_C_FOUND)
    set(ZOB_HAVE_MPI ON)
    add_library(zob_mpi STATIC ${PROJECT_SOURCE_DIR}/src/collectives/mpi_collectives.cpp
                               ${PROJECT_SOURCE_DIR}/src/driver/mpi_launcher.cpp)
    target_link_libraries(zob_mpi PUBLIC zob_core MPI::MPI_C)
    # The C API only: OpenMPI's mpi.h otherwise pulls in its deprecated C++ bindings.
    target_compile_definitions(zob_mpi PUBLIC ZOB_WITH_MPI=1 OMPI_SKIP_MPICXX=1 MPICH_SKIP_MPICXX=1)
    zob_warnings(zob_mpi)
  elseif(ZOB_MPI STREQUAL "ON")
    message(FATAL_ERROR "ZOB_MPI=ON but no MPI was found; install libopenmpi-dev (scripts/deps)")
  else()
    message(STATUS "zob: MPI not found - building without --launcher mpi")
  endif()
endif()
