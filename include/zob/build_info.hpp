// What the binary was built from, for --version and DRIVERRESULT's environment.
#pragma once

namespace zob {

// The commit of the source tree at build time (cmake/GitCommit.cmake, run at every build, not
// only at configure time), "+dirty" when tracked files differed from it; "unknown" without git.
const char* build_git_commit();

}  // namespace zob
