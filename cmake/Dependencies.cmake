# Third-party dependencies: Debian packages only (scripts/deps installs them).
find_package(Threads REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
# fmt: its headers from Debian's libfmt-dev, its implementation compiled once into zob_fmt
# (src/common/fmt_instantiations.cpp says why): the binary then runs on machines without
# libfmt (the GPU machine has none), and no file pays for header-only fmt.
find_package(fmt 9 REQUIRED)
add_library(zob_fmt STATIC ${PROJECT_SOURCE_DIR}/src/common/fmt_instantiations.cpp)
target_include_directories(zob_fmt SYSTEM PUBLIC
                           $<TARGET_PROPERTY:fmt::fmt,INTERFACE_INCLUDE_DIRECTORIES>)
find_package(CLI11 2.1 REQUIRED)
if(ZOB_BUILD_TESTS)
  find_package(GTest REQUIRED)
endif()
# OpenBLAS for the CPU device's GEMMs (cblas_sbgemm / cblas_sgemm).
find_path(OPENBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread
          /usr/include/openblas /usr/include/x86_64-linux-gnu PATH_SUFFIXES openblas-pthread)
find_library(OPENBLAS_LIBRARY NAMES openblas)
if(NOT OPENBLAS_INCLUDE_DIR OR NOT OPENBLAS_LIBRARY)
  message(FATAL_ERROR "OpenBLAS not found: run scripts/deps (Debian package libopenblas-dev)")
endif()
add_library(zob_openblas INTERFACE)
target_include_directories(zob_openblas INTERFACE ${OPENBLAS_INCLUDE_DIR})
target_link_libraries(zob_openblas INTERFACE ${OPENBLAS_LIBRARY})
