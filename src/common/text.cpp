#include "zob/text.hpp"

#include <cstdio>

namespace zob {

std::string one_line(std::string text) {
  for (char& c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

void stderr_line(const std::string& kind, const std::string& text) {
  const std::string line = "zero3-offload-bench: " + kind + one_line(text) + "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

}  // namespace zob
