// Entry point: everything lives in src/app (dispatch), src/cli (flags) and src/driver. A build
// with MPI also hands over the --launcher mpi entry (src/driver/mpi_launcher.cpp).
#include "app/app.hpp"
#ifdef ZOB_WITH_MPI
#include "driver/mpi_launcher.hpp"
#endif

int main(int argc, char** argv) {
#ifdef ZOB_WITH_MPI
  return zob::app_main(argc, argv, &zob::run_mpi_launcher);
#else
  return zob::app_main(argc, argv);
#endif
}
