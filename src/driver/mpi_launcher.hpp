// --launcher mpi: this process is one rank of one arm, started by mpirun (on one host or
// several). Built only with MPI (target zob_mpi); main() hands it to app_main.
#pragma once
#include <string>
#include <vector>

#include "driver/driver.hpp"

namespace zob {

// The whole rank: checks, MPI_Init, device, the arm, the results gathered to rank 0, which
// merges them (merge_rank_results) and prints the reports as the fork launcher does for one
// arm. Returns the exit code (rank 0's is the run's; mpirun passes on a non-zero one).
int run_mpi_launcher(const MpiRequest& request);

// The checks that need no MPI (run before MPI_Init); "" when fine, else the UsageError text.
std::string mpi_launcher_refusal(const MpiRequest& request);

}  // namespace zob
