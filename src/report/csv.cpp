#include "report/csv.hpp"

#include <fmt/format.h>
#include <algorithm>

#include "zob/phase.hpp"

namespace zob {

namespace {

// A number cell: "" for a missing or null value, else as many digits as a double round-trips.
std::string cell(const nlohmann::json& j, const char* key) {
  const auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return "";
  if (it->is_number_integer()) return it->dump();
  return fmt::format("{}", it->get<double>());
}

// A text cell: quoted when it holds a comma, a quote or a line break (RFC 4180).
std::string text_cell(const std::string& s) {
  if (s.find_first_of(",\"\r\n") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

double phase_time(const nlohmann::json& p) {
  const auto dev = p.find("device_s");
  if (dev != p.end() && dev->is_number()) return dev->get<double>();
  const auto host = p.find("host_s");
  return host != p.end() && host->is_number() ? host->get<double>() : 0.0;
}

}  // namespace

int arm_rank(const std::string& key) {
  // The order the tool writes them (a parsed document may have sorted its keys).
  static const char* const kOrder[] = {"registered",         "unregistered", "pageable",
                                       "hostalloc",          "unpinned",     "pinned",
                                       "pinned-unregistered"};
  for (std::size_t i = 0; i < std::size(kOrder); ++i) {
    if (key == kOrder[i]) return static_cast<int>(i);
  }
  return static_cast<int>(std::size(kOrder));
}

std::vector<std::pair<std::string, const nlohmann::json*>> result_arms(const nlohmann::json& doc) {
  std::vector<std::pair<std::string, const nlohmann::json*>> out;
  if (!doc.is_object()) return out;
  for (const auto& [key, value] : doc.items()) {
    if (value.is_object() && value.contains("arm") && value["arm"].is_string()) {
      out.emplace_back(key, &value);
    }
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return arm_rank(a.first) < arm_rank(b.first);
  });
  return out;
}

std::vector<std::pair<std::string, double>> arm_phase_seconds(const nlohmann::json& arm) {
  std::vector<std::pair<std::string, double>> out;
  const auto it = arm.find("phases");
  if (it == arm.end() || !it->is_object()) return out;
  for (Phase p : kAllPhases) {
    if (it->contains(to_string(p))) out.emplace_back(to_string(p), phase_time((*it)[to_string(p)]));
  }
  for (const auto& [name, p] : it->items()) {
    if (!parse_phase(name) && p.is_object()) out.emplace_back(name, phase_time(p));
  }
  return out;
}

std::string render_csv(const nlohmann::json& doc) {
  std::string out = "row,arm,phase,step,seconds,device_s,host_s,bytes,gb_per_s\n";
  for (const auto& [name, arm] : result_arms(doc)) {
    const auto phases = arm->find("phases");
    for (const auto& [phase, seconds] : arm_phase_seconds(*arm)) {
      const nlohmann::json& p = (*phases)[phase];
      out += fmt::format("phase,{},{},,{},{},{},{},{}\n", text_cell(name), text_cell(phase),
                         fmt::format("{}", seconds), cell(p, "device_s"), cell(p, "host_s"),
                         cell(p, "bytes"), cell(p, "gb_per_s"));
    }
    const auto times = arm->find("step_times_s");
    if (times == arm->end() || !times->is_array()) continue;
    // The timed steps are numbered after the warmup, as the step loop counts them.
    const int warmup = arm->value("warmup", 0);
    int step = warmup;
    for (const auto& t : *times) {
      ++step;
      out += fmt::format("step,{},,{},{},,,,\n", text_cell(name), step,
                         t.is_number() ? fmt::format("{}", t.get<double>()) : std::string());
    }
  }
  return out;
}

}  // namespace zob
