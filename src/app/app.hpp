// The program: flags (src/cli) -> the run (src/driver), the adam and compare subcommands,
// --list-devices, or a hidden child entry point; every failure becomes one line on stderr and
// its exit code (exit_codes.hpp). The top layer: it may include every other folder, and none
// includes it (docs/architecture.md).
#pragma once
#include "driver/driver.hpp"

namespace zob {

// The --launcher mpi entry (run_mpi_launcher), handed to app_main by a main() built with MPI;
// nullptr in a build without it, where --launcher mpi is refused.
using MpiLauncherEntry = int (*)(const MpiRequest& request);

// The whole program. Returns the process exit code.
int app_main(int argc, char** argv, MpiLauncherEntry mpi_launcher = nullptr);

}  // namespace zob
