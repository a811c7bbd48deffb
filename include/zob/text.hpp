// Small text helpers shared by every layer.
#pragma once
#include <string>

namespace zob {

// text with newlines and carriage returns turned into spaces and trailing spaces dropped:
// errors and notices travel as one line.
std::string one_line(std::string text);

}  // namespace zob
