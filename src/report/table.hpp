// The table of the arms and its summary line, as each version of the upstream script prints
// them (--compat v1 / v2): CI pipelines grep these lines, so each version is a printer of its
// own (a Reporter); a sweep prints one table per configuration, each named.
#pragma once
#include <memory>

#include "report/reporter.hpp"
#include "zob/config.hpp"

namespace zob {

// The table printer of `compat`: v1 the tool's names, widths 14/14/14/15, 4 decimals; v2 the
// v2 script's banner, model and batch lines, names, widths 22/14/14/16, 3 decimals.
std::unique_ptr<Reporter> compat_table_reporter(Compat compat);

}  // namespace zob
