// Small text helpers shared by every layer.
#pragma once
#include <string>
#include <vector>

namespace zob {

// text with newlines and carriage returns turned into spaces and trailing spaces dropped:
// errors and notices travel as one line.
std::string one_line(std::string text);

// The comma-separated items of a flag's list, empty ones included ("a,,b" -> a, "", b; "" ->
// one empty item), for the list parsers to refuse with their own words.
std::vector<std::string> split_list(const std::string& text);

// Writes "zero3-offload-bench: <kind><text as one line>\n" to stderr and flushes it; kind is
// "error: ", "warning: ", "notice: " or "".
void stderr_line(const std::string& kind, const std::string& text);

}  // namespace zob
