#include "zob/trace.hpp"

#include <map>

namespace zob {
namespace {

// Stable thread ids so every arm's tracks line up in the same order in the viewer.
int track_id(const std::string& track) {
  static const std::map<std::string, int> ids{
      {"compute", 1}, {"h2d", 2}, {"d2h", 3}, {"cpu_adam", 4}};
  const auto it = ids.find(track);
  return it == ids.end() ? 9 : it->second;
}

std::string fmt_step_name(int index, bool warmup);

}  // namespace

nlohmann::json chrome_trace(const std::vector<TracedRun>& runs) {
  nlohmann::json events = nlohmann::json::array();
  int pid = 0;
  for (const auto& run : runs) {
    ++pid;
    events.push_back(
        {{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", run.label}}}});
    std::map<std::string, bool> named;
    double step_start_us = 0;
    int step_index = 0;
    for (const auto& sample : run.arm->samples) {
      const bool warm = step_index < run.arm->warmup;
      events.push_back(
          {{"ph", "X"},
           {"pid", pid},
           {"tid", 0},
           {"name", fmt_step_name(step_index + 1, warm)},  // from 1, as stderr and the CSV count
           {"ts", step_start_us},
           {"dur", sample.wall_s * 1e6},
           {"args", {{"loss", sample.loss}}}});
      for (const auto& span : sample.spans) {
        if (!named[span.track]) {
          named[span.track] = true;
          events.push_back({{"ph", "M"},
                            {"name", "thread_name"},
                            {"pid", pid},
                            {"tid", track_id(span.track)},
                            {"args", {{"name", span.track}}}});
        }
        events.push_back({{"ph", "X"},
                          {"pid", pid},
                          {"tid", track_id(span.track)},
                          {"name", span.name},
                          {"ts", step_start_us + span.start_s * 1e6},
                          {"dur", span.duration_s * 1e6}});
      }
      step_start_us += sample.wall_s * 1e6;
      ++step_index;
    }
    events.push_back({{"ph", "M"},
                      {"name", "thread_name"},
                      {"pid", pid},
                      {"tid", 0},
                      {"args", {{"name", "steps"}}}});
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

namespace {
std::string fmt_step_name(int index, bool warmup) {
  return "step " + std::to_string(index) + (warmup ? " (warmup)" : "");
}
}  // namespace

}  // namespace zob
