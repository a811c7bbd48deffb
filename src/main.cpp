// Entry point: everything lives in src/cli (flags, subcommands) and src/driver. A build with
// MPI also hands over the --launcher mpi entry (src/driver/mpi_launcher.cpp).
#include "cli/cli.hpp"
#ifdef ZOB_WITH_MPI
#include "driver/mpi_launcher.hpp"
#endif

int main(int argc, char** argv) {
#ifdef ZOB_WITH_MPI
  return zob::cli_main(argc, argv, &zob::run_mpi_launcher);
#else
  return zob::cli_main(argc, argv);
#endif
}
