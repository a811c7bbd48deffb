// Results for spreadsheets (--csv FILE), and the arms of a saved result document, which the
// CSV, the chart (plot.hpp) and `compare` read the same way.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace zob {

// The arm objects of a DRIVERRESULT document, by their key there ("registered", "unpinned",
// ...): every top-level object with an "arm" field, in the order the tool writes them.
std::vector<std::pair<std::string, const nlohmann::json*>> result_arms(const nlohmann::json& doc);
// That order: registered, unregistered, pageable, hostalloc, unpinned, pinned,
// pinned-unregistered, then any other key.
int arm_rank(const std::string& key);

// The phases of an arm object in the order a step runs them (zob/phase.hpp), unknown names
// (a newer step's) after them by name, with each one's time per step in seconds: device
// events where the phase has them, else the host's.
std::vector<std::pair<std::string, double>> arm_phase_seconds(const nlohmann::json& arm);

// The CSV text: a header, then one row per arm x phase ("phase") and one per arm x timed step
// ("step"). Columns: row,arm,phase,step,seconds,device_s,host_s,bytes,gb_per_s.
std::string render_csv(const nlohmann::json& doc);

}  // namespace zob
