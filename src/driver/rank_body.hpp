// The body of one rank of an arm, whichever launcher started it: the fork launcher
// (ranks.cpp: the arm's child forks the ranks of one host) and --launcher mpi
// (mpi_launcher.cpp: mpirun starts them on one host or several) each place the rank, open its
// device and host collectives and catch its failure their own way, and run the rank through
// these, so a step a rank takes is written once.
#pragma once
#include <string>

#include "zob/collectives.hpp"
#include "zob/config.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob {

// The device of the rank that is `local_rank` on its host: one device per rank from
// --device-index on; every rank on --device-index where they share one device (the CPU
// device is one device; ranks_share_device: the test hook).
int rank_device_index(const RunConfig& config, int local_rank, bool ranks_share_device);

// The rank's arm on `device`: the device's own collectives (NCCL on CUDA) bootstrapped over
// `host`, none on the CPU device, whose memory the host collectives address directly; then
// the arm as rank host.rank() of host.size() (zob/step.hpp run_rank_arm). A failure to join
// the device collectives is told to the peers (host.abort) and thrown on; so is whatever the
// arm throws (CollectiveError when a peer failed).
ArmResult run_rank_body(const RunConfig& config, Arm arm, Device& device, Collectives& host,
                        bool ranks_share_device);

// A result as it leaves this process (a rank's to its launcher, through the fork launcher's
// pipe or the gather to MPI rank 0; the fork launcher's merged one to the parent): stamped
// with the arm and this process's pid, one JSON document.
std::string result_document(ArmResult& result, Arm arm);

// The per-wait deadline of the collectives: half of --timeout (so a hung rank is named before
// the arm's own deadline), at most 120 s; 120 s without --timeout.
double collective_timeout_s(const RunConfig& config);

}  // namespace zob
