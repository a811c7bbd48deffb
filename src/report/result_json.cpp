// ArmResult <-> JSON: the child -> parent pipe format. Complete and lossless (samples, phases
// and spans included). arm_object also renders DRIVERRESULT's arm fields (report.cpp adds the
// run-level details), so both documents take every arm field from one place.
#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "report/details.hpp"
#include "report/json_util.hpp"
#include "zob/result.hpp"

namespace zob {

namespace {

// An integer field of the pipe format. nlohmann's get<int>() converts 1e300 (undefined
// behaviour) and wraps 2^40 silently; a result with such a field is malformed and refused with
// the json exception the parent already handles. Found by tests/fuzz/arm_result_fuzz.cpp.
template <class T>
T integer(const nlohmann::json& j) {
  if (j.is_number_unsigned()) {
    const auto v = j.get<std::uint64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  } else if (j.is_number_integer()) {
    const auto v = j.get<std::int64_t>();
    if (std::in_range<T>(v)) return static_cast<T>(v);
  } else {
    throw nlohmann::json::type_error::create(
        302, std::string("type must be an integer, but is ") + j.type_name(), &j);
  }
  throw nlohmann::json::out_of_range::create(
      406, "integer " + j.dump() + " is out of range for its field", &j);
}

// A float field (the loss): a double beyond float's range is infinite, not undefined behaviour.
float to_float(double v) {
  if (std::isnan(v) || std::fabs(v) <= std::numeric_limits<float>::max())
    return static_cast<float>(v);
  return v > 0 ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
}

}  // namespace

void to_json(nlohmann::json& j, const DeviceInfo& d) {
  j = nlohmann::json{{"backend", d.backend},
                     {"name", d.name},
                     {"runtime_version", d.runtime_version},
                     {"driver_version", d.driver_version},
                     {"pci_bus_id", d.pci_bus_id},
                     {"total_memory_bytes", d.total_memory_bytes},
                     {"numa_node", d.numa_node},
                     {"memory_is_host_ram", d.memory_is_host_ram}};
}

void from_json(const nlohmann::json& j, DeviceInfo& d) {
  d.backend = j.at("backend").get<std::string>();
  d.name = j.at("name").get<std::string>();
  d.runtime_version = j.at("runtime_version").get<std::string>();
  d.driver_version = j.at("driver_version").get<std::string>();
  d.pci_bus_id = j.at("pci_bus_id").get<std::string>();
  d.total_memory_bytes = integer<std::uint64_t>(j.at("total_memory_bytes"));
  d.numa_node = integer<int>(j.at("numa_node"));
  d.memory_is_host_ram = j.value("memory_is_host_ram", false);  // absent before 2026-12-07
}

namespace {

nlohmann::json phase_json(const PhaseSample& p) {
  return {{"device_s", finite_or_null(p.device_s)},
          {"host_s", finite_or_null(p.host_s)},
          {"bytes", p.bytes},
          {"params", p.params}};
}

PhaseSample phase_from(const nlohmann::json& j) {
  PhaseSample p;
  p.device_s = number_or_nan(j.at("device_s"));
  p.host_s = number_or_nan(j.at("host_s"));
  p.bytes = integer<std::uint64_t>(j.at("bytes"));
  p.params = integer<std::int64_t>(j.at("params"));
  return p;
}

nlohmann::json sample_json(const StepSample& s) {
  nlohmann::json phases = nlohmann::json::object();
  for (const auto& [name, p] : s.phases) phases[name] = phase_json(p);
  nlohmann::json spans = nlohmann::json::array();
  for (const auto& sp : s.spans) {
    spans.push_back({{"track", sp.track},
                     {"name", sp.name},
                     {"start_s", finite_or_null(sp.start_s)},
                     {"duration_s", finite_or_null(sp.duration_s)}});
  }
  return {{"wall_s", finite_or_null(s.wall_s)},
          {"loss", finite_or_null(s.loss)},
          {"phases", phases},
          {"spans", spans}};
}

StepSample sample_from(const nlohmann::json& j) {
  StepSample s;
  s.wall_s = number_or_nan(j.at("wall_s"));
  s.loss = to_float(number_or_nan(j.at("loss")));
  for (const auto& [name, p] : j.at("phases").items()) s.phases[name] = phase_from(p);
  for (const auto& sp : j.at("spans")) {
    s.spans.push_back(TraceSpan{sp.at("track").get<std::string>(), sp.at("name").get<std::string>(),
                                number_or_nan(sp.at("start_s")),
                                number_or_nan(sp.at("duration_s"))});
  }
  return s;
}

}  // namespace

nlohmann::json rank_results_json(const std::vector<RankResult>& ranks) {
  nlohmann::json out = nlohmann::json::array();
  for (const RankResult& k : ranks) {
    nlohmann::json steps = nlohmann::json::array();
    for (double t : k.step_s) steps.push_back(finite_or_null(t));
    nlohmann::json phases = nlohmann::json::object();
    for (const auto& [name, p] : k.phases) {
      phases[name] = phase_json(p);
      if (p.device_s < 0) phases[name]["device_s"] = nullptr;  // not a device phase
    }
    out.push_back({{"rank", k.rank},
                   {"device_index", k.device_index},
                   {"pid", k.pid},
                   {"ok", k.ok},
                   {"error", k.error},
                   {"step_s", steps},
                   {"phases", phases},
                   {"shard_elems", k.shard_elems},
                   {"shard_checksum", k.shard_checksum},
                   {"placement", k.placement}});
  }
  return out;
}

std::vector<RankResult> rank_results_from(const nlohmann::json& j) {
  std::vector<RankResult> out;
  for (const auto& e : j) {
    RankResult k;
    k.rank = integer<int>(e.at("rank"));
    k.device_index = integer<int>(e.at("device_index"));
    k.pid = integer<int>(e.at("pid"));
    k.ok = e.at("ok").get<bool>();
    k.error = e.at("error").get<std::string>();
    for (const auto& t : e.at("step_s")) k.step_s.push_back(number_or_nan(t));
    for (const auto& [name, p] : e.at("phases").items()) k.phases[name] = phase_from(p);
    k.shard_elems = integer<std::int64_t>(e.at("shard_elems"));
    k.shard_checksum = e.at("shard_checksum").get<std::string>();
    if (e.contains("placement")) k.placement = e.at("placement").get<ThreadPlacement>();
    out.push_back(std::move(k));
  }
  return out;
}

template <class Json>
Json arm_object(const ArmResult& r, ArmDocument doc) {
  const bool pipe = doc == ArmDocument::pipe;
  auto measured = [&](double v) {
    return pipe || r.ok ? finite_or_null(v) : nlohmann::json(nullptr);
  };
  Json j = Json::object();
  // the Python script's keys
  if (!pipe) j["register"] = r.arm == Arm::registered;
  j["device"] = r.device;
  j["model"] = r.model;
  if (pipe) j["params"] = r.params;
  j["params_b"] = r.params_b;
  j["batch"] = r.batch;
  j["seq"] = r.seq;
  j["tokens_per_step"] = r.tokens_per_step;
  j["steps"] = r.steps;
  j["step_avg_s"] = measured(r.step_avg_s);
  j["step_min_s"] = measured(r.step_min_s);
  j["gpu_peak_gb"] = measured(r.gpu_peak_gb);
  // additions
  if (r.gpu_reserved_peak_gb > 0) j["gpu_reserved_peak_gb"] = r.gpu_reserved_peak_gb;
  // The exact count: params_b keeps the script's 3 decimals (0.0 for a small model).
  if (!pipe) j["params"] = r.params;
  j["arm"] = to_string(r.arm);
  j["ok"] = r.ok;
  if (pipe) {
    j["error"] = r.error;
    j["failed_step"] = r.failed_step;
    j["failed_phase"] = r.failed_phase;
    j["device_other_processes"] = r.device_other_processes;
    j["device_free_bytes"] = r.device_free_bytes;
  }
  j["pid"] = r.pid;
  j["loop"] = r.loop;
  if (pipe) {
    j["device_info"] = nlohmann::json(r.device_info);
    nlohmann::json samples = nlohmann::json::array();
    for (const auto& s : r.samples) samples.push_back(sample_json(s));
    j["samples"] = std::move(samples);
  } else {
    nlohmann::json times = nlohmann::json::array();
    for (double t : r.timed_step_s()) times.push_back(finite_or_null(t));
    j["step_times_s"] = std::move(times);
    nlohmann::json losses = nlohmann::json::array();
    for (const auto& s : r.samples) losses.push_back(finite_or_null(s.loss));
    j["losses"] = std::move(losses);
  }
  j["warmup"] = r.warmup;
  j["param_checksum"] = r.param_checksum;
  j["registration"] = r.registration;
  j["registration_verified"] = r.registration_verified;
  j["registered_at_driver"] = r.registered_at_driver;
  j["locked_bytes"] = r.locked_bytes;
  j["registered_bytes"] = r.registered_bytes;
  j["runtime_pinned_bytes"] = r.runtime_pinned_bytes;
  j["register_s"] = finite_or_null(r.register_s);
  j["setup_s"] = finite_or_null(r.setup_s);
  j["adam_threads"] = r.adam_threads;
  j["schedule"] = r.schedule;
  j["placement"] = nlohmann::json(r.placement);
  j["bound"] = pipe || r.ok ? nlohmann::json(r.bound) : nlohmann::json(nullptr);
  j["wall_s"] = measured(r.wall_s);
  j["host_mapped_bytes"] = r.host_mapped_bytes;
  if (!pipe) {
    j["device_name"] = r.device_info.name;
    j["phases"] = phases_json(r);
  }
  if (r.gpus != 1 || !r.ranks.empty()) {
    j["gpus"] = r.gpus;
    j["ranks"] = rank_results_json(r.ranks);
  }
  if (!r.device_ops.empty()) {
    auto ops = Json::array();
    for (const ModuleDeviceOps& m : r.device_ops) {
      ops.push_back(Json{{"module", m.module},
                         {"plan", {m.plan_forward, m.plan_backward}},
                         {"kernels", {m.kernels_forward, m.kernels_backward}},
                         {"copies", {m.copies_forward, m.copies_backward}},
                         {"plan_fetches", {m.plan_fetch_forward, m.plan_fetch_backward}},
                         {"fetches", {m.fetch_forward, m.fetch_backward}},
                         {"plan_grad_copies", {m.plan_grad_d2h, m.plan_grad_h2d}},
                         {"grad_copies", {m.grad_d2h, m.grad_h2d}}});
    }
    j["device_ops"] = std::move(ops);
  }
  return j;
}
template nlohmann::json arm_object<nlohmann::json>(const ArmResult&, ArmDocument);
template nlohmann::ordered_json arm_object<nlohmann::ordered_json>(const ArmResult&, ArmDocument);

void to_json(nlohmann::json& j, const ArmResult& r) {
  j = arm_object<nlohmann::json>(r, ArmDocument::pipe);
}

void from_json(const nlohmann::json& j, ArmResult& r) {
  r.arm = parse_arm(j.at("arm").get<std::string>());
  r.ok = j.at("ok").get<bool>();
  r.error = j.at("error").get<std::string>();
  r.failed_step = integer<int>(j.at("failed_step"));
  r.failed_phase = j.at("failed_phase").get<std::string>();
  r.device_other_processes = integer<int>(j.at("device_other_processes"));
  r.device_free_bytes = integer<std::uint64_t>(j.at("device_free_bytes"));
  r.device = j.at("device").get<std::string>();
  r.model = j.at("model").get<std::string>();
  r.params = integer<std::int64_t>(j.at("params"));
  r.params_b = j.at("params_b").get<double>();
  r.batch = integer<std::int64_t>(j.at("batch"));
  r.seq = integer<std::int64_t>(j.at("seq"));
  r.tokens_per_step = integer<std::int64_t>(j.at("tokens_per_step"));
  r.steps = integer<int>(j.at("steps"));
  r.warmup = integer<int>(j.at("warmup"));
  r.step_avg_s = number_or_nan(j.at("step_avg_s"));
  r.step_min_s = number_or_nan(j.at("step_min_s"));
  r.gpu_peak_gb = number_or_nan(j.at("gpu_peak_gb"));
  if (j.contains("gpu_reserved_peak_gb"))
    r.gpu_reserved_peak_gb = j.at("gpu_reserved_peak_gb").get<double>();
  r.device_info = j.at("device_info").get<DeviceInfo>();
  r.loop = j.at("loop").get<std::string>();
  r.samples.clear();
  for (const auto& s : j.at("samples")) r.samples.push_back(sample_from(s));
  r.param_checksum = j.at("param_checksum").get<std::string>();
  r.registration = j.at("registration").get<std::string>();
  r.registration_verified = j.at("registration_verified").get<bool>();
  r.registered_at_driver = j.contains("registered_at_driver")
                               ? j.at("registered_at_driver").get<std::string>()
                               : "not-checked";
  r.locked_bytes = integer<std::uint64_t>(j.at("locked_bytes"));
  r.registered_bytes = integer<std::uint64_t>(j.at("registered_bytes"));
  r.runtime_pinned_bytes =
      j.contains("runtime_pinned_bytes") ? integer<std::uint64_t>(j.at("runtime_pinned_bytes")) : 0;
  r.register_s = number_or_nan(j.at("register_s"));
  r.setup_s = number_or_nan(j.at("setup_s"));
  r.adam_threads = integer<int>(j.at("adam_threads"));
  r.pid = j.contains("pid") ? integer<int>(j.at("pid")) : 0;
  r.gpus = j.contains("gpus") ? integer<int>(j.at("gpus")) : 1;
  r.ranks.clear();
  if (j.contains("ranks")) r.ranks = rank_results_from(j.at("ranks"));
  // Added after the first schema: absent in older documents.
  r.schedule = j.value("schedule", std::string("stock"));
  if (j.contains("bound")) r.bound = j.at("bound").get<StepBound>();
  if (j.contains("placement")) r.placement = j.at("placement").get<ThreadPlacement>();
  r.host_mapped_bytes =
      j.contains("host_mapped_bytes") ? integer<std::uint64_t>(j.at("host_mapped_bytes")) : 0;
  r.wall_s = j.contains("wall_s") ? number_or_nan(j.at("wall_s")) : 0.0;
  r.device_ops.clear();
  for (const auto& m : j.value("device_ops", nlohmann::json::array())) {
    const auto pair = [&](const char* key, std::int64_t& fwd, std::int64_t& bwd) {
      fwd = integer<std::int64_t>(m.at(key).at(0));
      bwd = integer<std::int64_t>(m.at(key).at(1));
    };
    ModuleDeviceOps d;
    d.module = m.at("module").get<std::string>();
    pair("plan", d.plan_forward, d.plan_backward);
    pair("kernels", d.kernels_forward, d.kernels_backward);
    pair("copies", d.copies_forward, d.copies_backward);
    // DeepSpeed's copies per module came later: absent in older documents.
    if (m.contains("fetches")) {
      pair("plan_fetches", d.plan_fetch_forward, d.plan_fetch_backward);
      pair("fetches", d.fetch_forward, d.fetch_backward);
      pair("plan_grad_copies", d.plan_grad_d2h, d.plan_grad_h2d);
      pair("grad_copies", d.grad_d2h, d.grad_h2d);
    }
    r.device_ops.push_back(std::move(d));
  }
}

void to_json(nlohmann::json& j, const StepBound& b) {
  j = nlohmann::json{
      {"adam_s", finite_or_null(b.adam_s)},
      {"adam_measured_s", finite_or_null(b.adam_measured_s)},
      {"probe_gb_per_s", finite_or_null(b.probe_gb_per_s)},
      {"probe_passes", b.probe_passes},
      {"d2h_s", finite_or_null(b.d2h_s)},
      {"h2d_s", finite_or_null(b.h2d_s)},
      {"pcie_s", finite_or_null(b.pcie_s)},
      {"compute_s", finite_or_null(b.compute_s)},
      {"bound_s", finite_or_null(b.bound_s)},
      {"ratio", finite_or_null(b.ratio)},
      {"host_bytes", finite_or_null(b.host_bytes)},
      {"host_gb_per_s", finite_or_null(b.host_gb_per_s)},
      {"host_rate_from",
       b.host_rate_from.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.host_rate_from)},
      {"host_memory_s", finite_or_null(b.host_memory_s)},
      {"serial_s", finite_or_null(b.serial_s)},
      {"serial_host_bytes", finite_or_null(b.serial_host_bytes)},
      {"physical_s", finite_or_null(b.physical_s)},
      {"physical_ratio", finite_or_null(b.physical_ratio)},
      {"adam_pass_gb_per_s", finite_or_null(b.adam_pass_gb_per_s)},
      {"fastest_step_s", finite_or_null(b.fastest_step_s)},
      {"beaten", b.beaten},
      {"physical_verdict",
       b.physical_verdict.empty() ? nlohmann::json(nullptr) : nlohmann::json(b.physical_verdict)}};
}

void from_json(const nlohmann::json& j, StepBound& b) {
  const auto optional = [&](const char* key) {
    return j.contains(key) ? number_or_nan(j.at(key)) : 0.0;
  };
  b.adam_s = number_or_nan(j.at("adam_s"));
  b.adam_measured_s = optional("adam_measured_s");  // absent in documents of older versions
  b.probe_gb_per_s = optional("probe_gb_per_s");
  // absent before 2026-12-03 (the passes all before the steps, 5)
  b.probe_passes = j.contains("probe_passes") ? j.at("probe_passes").get<int>() : 0;
  b.d2h_s = optional("d2h_s");
  b.h2d_s = optional("h2d_s");
  b.pcie_s = number_or_nan(j.at("pcie_s"));
  b.compute_s = number_or_nan(j.at("compute_s"));
  b.bound_s = number_or_nan(j.at("bound_s"));
  b.ratio = number_or_nan(j.at("ratio"));
  b.host_bytes = optional("host_bytes");        // the physical bound: absent before issue 25
  b.host_gb_per_s = optional("host_gb_per_s");  // absent before 2026-12-02's H200 recordings
  b.host_memory_s = optional("host_memory_s");
  // absent before 2026-12-02's host-memory recordings (results/h200/2026-12-02-host-memory)
  b.host_rate_from = j.contains("host_rate_from") && j.at("host_rate_from").is_string()
                         ? j.at("host_rate_from").get<std::string>()
                         : "";
  b.serial_s = optional("serial_s");
  b.serial_host_bytes = optional("serial_host_bytes");
  b.physical_s = optional("physical_s");
  b.physical_ratio = optional("physical_ratio");
  // absent before issue 37 (the bound was raised to the step's own rate there)
  b.adam_pass_gb_per_s = optional("adam_pass_gb_per_s");
  b.fastest_step_s = optional("fastest_step_s");
  b.beaten = j.contains("beaten") && j.at("beaten").is_boolean() && j.at("beaten").get<bool>();
  b.physical_verdict = j.contains("physical_verdict") && j.at("physical_verdict").is_string()
                           ? j.at("physical_verdict").get<std::string>()
                           : "";
}

void to_json(nlohmann::json& j, const ThreadPlacement& p) {
  j = nlohmann::json{{"policy", p.policy}, {"cpus", p.cpus}};
}

void from_json(const nlohmann::json& j, ThreadPlacement& p) {
  p.policy = j.at("policy").get<std::string>();
  p.cpus.clear();
  for (const auto& c : j.at("cpus")) p.cpus.push_back(integer<int>(c));
}

std::vector<double> ArmResult::timed_step_s() const {
  std::vector<double> out;
  const std::size_t first = warmup > 0 ? static_cast<std::size_t>(warmup) : 0;
  for (std::size_t i = first; i < samples.size(); ++i) out.push_back(samples[i].wall_s);
  return out;
}

}  // namespace zob
