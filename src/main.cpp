// Entry point: everything lives in src/cli (flags, subcommands) and src/driver.
#include <cstdio>

int main() {
  std::fputs("zero3-offload-bench: under construction\n", stderr);
  return 1;
}
