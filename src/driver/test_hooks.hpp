// Test-only hooks, and the one place that reads them: environment variables that the e2e
// tests (tests/e2e) and the GPU scripts (scripts/cuda-ranks-check, bench/) set to make a
// child, a rank or an MPI rank fail on purpose, or to put every rank on one device. A user
// never sets them. The environment is read once per process, at the first call; nothing else
// in the driver calls getenv for them.
//
//   ZOB_TEST_CHILD_FAULT=<arm>:<segv|hang|ignore_sigint|exit|garbage|noresult|perturb|
//                               memlock_taken|probe_low|slow>
//   ZOB_TEST_RANK_FAULT=<arm>:<rank>:<segv|kill|exit|hang>[:<n>]
//   ZOB_TEST_MPI_RANK_FAULT=<rank>:<throw|hang>  or  <rank>:<throw|segv|kill|exit|hang>:<n>
//   ZOB_TEST_SHARE_DEVICE=1
//   ZOB_TEST_DEVICE_FAULT=<arm>:<operation>:<n>
//   ZOB_TEST_DEVICE_SHARED=<arm>:<other processes>[:<free bytes taken>]
//   ZOB_TEST_REGISTRATION=<arm>:<skip|register>
//
// Backend-only test hooks, read by their backend (each documented in docs/schema.md):
//   ZOB_TEST_CUDA_FAULT=<call>:<n>[:<error>]   src/backends/cuda (cuda_test_fault.hpp)
//   ZOB_TEST_CUDA_SKIP_REGISTER=1              src/backends/cuda (cuda_test_fault.hpp)
#pragma once
#include <memory>
#include <string>

#include "zob/collectives.hpp"
#include "zob/device.hpp"
#include "zob/result.hpp"

namespace zob::test_hooks {

// ZOB_TEST_CHILD_FAULT for `arm`'s child: it fails in that way before doing any work (the
// kinds above); "perturb": it runs, then perturb_result() changes its first timed loss, as if
// that arm had computed something different; "memlock_taken": it runs with RLIMIT_MEMLOCK
// lowered to 1 MiB, as if the lockable memory the pre-flight saw was gone by the time it locks.
// Applied at the child's entry; returns only where the kind lets the child go on. fd: the result
// pipe ("garbage" writes half a document there).
void apply_child_fault(Arm arm, int fd);
// perturb: 1 ulp added to the loss of the first timed step of an ok result; slow: every step's
// wall time tripled (a candidate --fit must not pick); probe_low: its
// physical bound made again from a memory probe that read 1000 times too slow (the median
// step's wall time for its ratio: odd counts in the tests), as a probe taken while a
// neighbour held the host memory would.
void perturb_result(ArmResult& result);

// ZOB_TEST_RANK_FAULT for rank `rank` of `arm` (fork launcher): `host` wrapped so that the
// rank fails in that way at its n-th collective call (default 5: in the set-up's collectives;
// the tiny e2e model's first step starts about the 20th); nullptr when the variable does not
// name this rank of this arm.
std::unique_ptr<Collectives> rank_fault_collectives(Collectives& host, Arm arm, int rank);

// ZOB_TEST_MPI_RANK_FAULT: rank `rank` of --launcher mpi throws, or stops answering, just
// before its arm starts; returns at once for every other rank (and when the spec has an <n>).
void apply_mpi_rank_fault(int rank);
// ZOB_TEST_MPI_RANK_FAULT with an <n>: `comm` wrapped so that rank `rank` fails that way at its
// n-th collective call, inside a step, while its peers wait for it in that collective;
// nullptr for every other rank, and without an <n>.
std::unique_ptr<Collectives> mpi_rank_fault_collectives(Collectives& comm, int rank);

// ZOB_TEST_DEVICE_FAULT for `arm`'s child (every rank of it): `device` wrapped so that the
// n-th call of that Device operation (e.g. embedding_backward: once per step, so n is the
// step) fails as a lost device, and every device operation after it too (fault_device.hpp);
// ZOB_TEST_DEVICE_SHARED: every arm's device reports a free memory (64 GiB where the device
// cannot tell), the named arm's this many other processes on the device and that much of the
// free memory taken, as another run on the GPU would show. `device` itself when neither
// variable applies.
// ZOB_TEST_REGISTRATION for `arm`: "skip": the wrapped device answers every registration as
// done and registers nothing (the backend's own verification bypassed, as a runtime that lies);
// "register": the arm's locked-only buffers are registered too (register_locked_buffers_for_test
// in zob/host_memory.hpp), as a bug would. Either way the arm's own check of what the driver
// reports (check_driver_registration, step/arm_result_fill.hpp) must fail the arm.
std::unique_ptr<Device> fault_device(std::unique_ptr<Device> device, Arm arm);
// The device probe's free memory: `real`, or under ZOB_TEST_DEVICE_SHARED=probe:N:BYTES what a
// device of `real` free (64 GiB where it cannot tell, as FaultDevice) has once another process
// holds BYTES of it, so the pre-flight's use of the free figure is tested on the CPU device.
std::uint64_t probe_free_bytes(std::uint64_t real);

// ZOB_TEST_SHARE_DEVICE=1: every rank of --gpus N on device --device-index, so the multi-rank
// path of an accelerator runs on a one-GPU machine (the results count, the timings do not).
bool ranks_share_device();

}  // namespace zob::test_hooks
