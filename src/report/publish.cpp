#include "report/publish.hpp"

#include <fmt/format.h>
#include <cstdio>

#include "report/csv.hpp"
#include "report/deepspeed_gap.hpp"
#include "report/deepspeed_settings.hpp"
#include "report/details.hpp"
#include "report/fit_report.hpp"
#include "report/glance.hpp"
#include "report/json_util.hpp"
#include "report/output_file.hpp"
#include "report/plot.hpp"
#include "report/report.hpp"
#include "report/table.hpp"
#include "report/verdict.hpp"
#include "zob/model.hpp"
#include "zob/text.hpp"
#include "zob/trace.hpp"

namespace zob {

namespace {

// A section of stdout that one render function of the run prints.
class Section final : public Reporter {
 public:
  explicit Section(std::string (*render_run)(const RunResult&)) : render_run_(render_run) {}
  std::string render(const ReportContext& context) const override {
    return render_run_(context.run);
  }

 private:
  std::string (*render_run_)(const RunResult&);
};

// The last line of stdout, the one the upstream scripts' parsers read.
class DriverResultLine final : public Reporter {
  std::string render(const ReportContext& context) const override {
    return "DRIVERRESULT=" + dump_json(context.driver_result) + "\n";
  }
};

// --json FILE: the DRIVERRESULT document, indented.
class JsonFile final : public Reporter {
  std::string write(const ReportContext& context) const override {
    const std::string& path = context.run.config.json_path;
    if (path.empty()) return "";
    write_output_file(path, dump_json(context.driver_result, 2) + "\n");
    return "the result (DRIVERRESULT) to " + path;
  }
};

// The CSV and the chart read the document as a saved one is read (csv.hpp: result_arms).
nlohmann::json as_saved(const ReportContext& context) {
  return nlohmann::json::parse(dump_json(context.driver_result));
}

// --csv FILE: one row per arm x phase and per arm x timed step.
class CsvFile final : public Reporter {
  std::string write(const ReportContext& context) const override {
    const std::string& path = context.run.config.csv_path;
    if (path.empty()) return "";
    write_output_file(path, render_csv(as_saved(context)));
    return "the CSV to " + path;
  }
};

// The chart's title: what ran, where and when ("synthetic-h64-l2, --schedule deepspeed, cpu
// (Intel Xeon ...), 2026-12-04T18:00:00Z").
std::string chart_title(const RunResult& run) {
  std::string title = fmt::format("{}, --schedule {}, {}", model_name(run.config.model),
                                  to_string(run.config.schedule), to_string(run.config.device));
  if (!run.device_info.name.empty()) title += " (" + run.device_info.name + ")";
  if (!run.started_utc.empty()) title += ", " + run.started_utc;
  return title;
}

// --plot FILE: the chart (SVG, or PNG through Cairo).
class ChartFile final : public Reporter {
  std::string write(const ReportContext& context) const override {
    const std::string& path = context.run.config.plot_path;
    if (path.empty()) return "";
    write_chart({{chart_title(context.run), as_saved(context)}}, path);
    return "the chart to " + path;
  }
};

// --trace FILE: every arm run that produced steps, "registered", "registered #2", ...
class TraceFile final : public Reporter {
  std::string write(const ReportContext& context) const override {
    const RunResult& run = context.run;
    if (run.config.trace_path.empty()) return "";
    std::vector<TracedRun> traced;
    for (std::size_t k = 0; k < run.rounds.size(); ++k) {
      for (const auto& a : run.rounds[k]) {
        if (a.samples.empty()) continue;
        traced.push_back({k == 0 ? std::string(to_string(a.arm))
                                 : fmt::format("{} #{}", to_string(a.arm), k + 1),
                          &a});
      }
    }
    write_output_file(
        run.config.trace_path,
        chrome_trace(traced).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    return "the trace to " + run.config.trace_path;
  }
};

}  // namespace

std::vector<std::unique_ptr<Reporter>> run_reporters(const RunConfig& config) {
  // The Python script's lines keep their form and order (table, speedup, DRIVERRESULT); the
  // "# " header and the phase and registration sections are additions around them. The
  // verdict comes last before DRIVERRESULT (the line a reader looks for), followed only by
  // the settings that act on it, what the step does not contain (--model) and the projection
  // of the user's DeepSpeed step (--deepspeed-step).
  std::vector<std::unique_ptr<Reporter>> out;
  out.push_back(std::make_unique<Section>(&render_environment_header));
  out.push_back(compat_table_reporter(config.compat));
  // --fit: its table, winner and the winner's settings take the place of the headline's
  // settings and projection (fit_report.hpp).
  using Render = std::string (*)(const RunResult&);
  const std::vector<Render> sections =
      config.fit ? std::vector<Render>{&render_phase_section, &render_phase_bars,
                                       &render_rank_section,  &render_registration_lines,
                                       &render_verdict_lines, &render_not_contained,
                                       &render_fit_section}
                 : std::vector<Render>{&render_phase_section, &render_phase_bars,
                                       &render_rank_section,  &render_registration_lines,
                                       &render_verdict_lines, &render_settings_lines,
                                       &render_not_contained, &render_projection};
  for (Render section : sections) out.push_back(std::make_unique<Section>(section));
  out.push_back(std::make_unique<DriverResultLine>());
  out.push_back(std::make_unique<JsonFile>());
  out.push_back(std::make_unique<CsvFile>());
  out.push_back(std::make_unique<ChartFile>());
  out.push_back(std::make_unique<TraceFile>());
  return out;
}

std::string render_reports(const ReportContext& context) {
  std::string text;
  for (const auto& reporter : run_reporters(context.run.config)) text += reporter->render(context);
  return text;
}

std::string render_stdout(const RunResult& run) {
  const nlohmann::ordered_json doc = driver_result_json(run);
  return render_reports({run, doc});
}

bool publish_run(const RunResult& run) {
  for (const auto& w : run_warnings(run)) stderr_line("warning: ", w);
  // A check that could not run says so (DRIVERRESULT's "occupancy_check" too).
  if (const OccupancyCheck o = occupancy_check(run); !o.note.empty()) stderr_line("note: ", o.note);
  const nlohmann::ordered_json doc = driver_result_json(run);
  const ReportContext context{run, doc};
  const auto reporters = run_reporters(run.config);
  std::string text;
  for (const auto& reporter : reporters) text += reporter->render(context);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  // Each file on its own: one that cannot be written (a full disk, a folder removed since the
  // path was checked) does not keep the others from being written.
  bool ok = true;
  for (const auto& reporter : reporters) {
    try {
      const std::string what = reporter->write(context);
      if (!what.empty()) stderr_line("", "wrote " + what);
    } catch (const std::exception& e) {
      stderr_line("error: ", e.what());
      ok = false;
    }
  }
  return ok;
}

}  // namespace zob
