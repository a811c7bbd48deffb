// Entry point: everything lives in src/cli (flags, subcommands) and src/driver.
#include "cli/cli.hpp"

int main(int argc, char** argv) { return zob::cli_main(argc, argv); }
