// The flags of issue 8 (--schedule, --cpu-affinity, sweep lists), their round trip to the
// child, and the sweep in the table and DRIVERRESULT.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "cli/cli.hpp"
#include "report/json_util.hpp"
#include "report/report.hpp"
#include "zob/cpu_affinity.hpp"
#include "zob/errors.hpp"

namespace zob {
namespace {

CliCommand parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "zero3-offload-bench");
  return parse_command_line(flags);
}

std::string refusal(std::vector<std::string> flags) {
  try {
    parse(std::move(flags));
  } catch (const UsageError& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    return msg;
  }
  ADD_FAILURE() << "accepted";
  return "";
}

TEST(SchedCli, CompatFlag) {
  EXPECT_EQ(parse({}).run.compat, Compat::v1);
  const RunConfig v2 = parse({"--compat", "v2"}).run;
  EXPECT_EQ(v2.compat, Compat::v2);
  EXPECT_EQ(v2.arms, (std::vector<Arm>{Arm::pageable, Arm::registered}));
  EXPECT_EQ(v2.loop, Loop::offload_param);  // the v2 script's loop
  const RunConfig ablate = parse({"--compat", "v2", "--ablate-register"}).run;
  EXPECT_EQ(ablate.arms, (std::vector<Arm>{Arm::pageable, Arm::unregistered, Arm::registered}));
  EXPECT_TRUE(ablate.ablate_register);
  EXPECT_NE(refusal({"--ablate-register"}).find("--compat v2"), std::string::npos);
  EXPECT_NE(refusal({"--compat", "v2", "--arms", "registered"}).find("--arms"), std::string::npos);
  EXPECT_NE(refusal({"--compat", "v3"}).find("--compat"), std::string::npos);
}

TEST(SchedCli, ScheduleFlag) {
  // The default predicts DeepSpeed: its schedule, for any number of ranks.
  EXPECT_EQ(parse({}).run.schedule, Schedule::deepspeed);
  EXPECT_EQ(parse({"--gpus", "2", "--device", "cpu"}).run.schedule, Schedule::deepspeed);
  EXPECT_EQ(parse({"--launcher", "mpi"}).run.schedule, Schedule::deepspeed);
  EXPECT_EQ(parse({"--schedule", "deepspeed"}).run.schedule, Schedule::deepspeed);
  EXPECT_EQ(parse({"--gpus", "2", "--device", "cpu", "--schedule", "stock"}).run.schedule,
            Schedule::stock);
  EXPECT_EQ(parse({"--schedule", "overlap"}).run.schedule, Schedule::overlap);
  EXPECT_EQ(parse({"--schedule", "stock"}).run.schedule, Schedule::stock);
  EXPECT_NE(refusal({"--schedule", "fast"}).find("--schedule"), std::string::npos);
}

TEST(SchedCli, SweepLists) {
  const RunConfig one = parse({"--chunk-elems", "4096"}).run;
  EXPECT_EQ(one.chunk_elems, 4096);
  EXPECT_TRUE(one.chunk_elems_sweep.empty());
  EXPECT_TRUE(one.sub_group_size_sweep.empty());
  const RunConfig c =
      parse({"--schedule", "stock", "--chunk-elems", "300,100,7", "--sub-group-size", "1000,50"})
          .run;
  // The deepspeed schedule copies each sub-group whole: a chunk sweep there would not differ.
  EXPECT_NE(refusal({"--chunk-elems", "300,100"}).find("copies each sub-group whole"),
            std::string::npos);
  EXPECT_EQ(c.chunk_elems, 300);
  EXPECT_EQ(c.sub_group_size, 1000);
  EXPECT_EQ(c.chunk_elems_sweep, (std::vector<std::int64_t>{300, 100, 7}));
  EXPECT_EQ(c.sub_group_size_sweep, (std::vector<std::int64_t>{1000, 50}));
  for (const char* bad : {"1,,2", ",1", "1,", "1,x", "1,0", "1,-5", "3,3", "1,2251799813685249"}) {
    EXPECT_NE(refusal({"--chunk-elems", bad}).find("--chunk-elems"), std::string::npos) << bad;
    EXPECT_NE(refusal({"--sub-group-size", bad}).find("--sub-group-size"), std::string::npos)
        << bad;
  }
  // validate_run_config (the child's re-check) looks at every value of a sweep too.
  RunConfig bad = c;
  bad.chunk_elems_sweep[2] = 0;
  EXPECT_THROW(validate_run_config(bad), UsageError);
}

TEST(SchedCli, CpuAffinity) {
  const std::vector<int> allowed = allowed_cpu_list();
  const std::string first = std::to_string(allowed.front());
  RunConfig c = parse({"--cpu-affinity", first}).run;
  EXPECT_EQ(c.cpu_affinity, (std::vector<int>{allowed.front()}));
  EXPECT_EQ(c.threads, 1);  // one thread per listed CPU unless --threads says otherwise
  EXPECT_NE(refusal({"--cpu-affinity", first, "--threads", "2"}).find("--threads"),
            std::string::npos);
  const std::string outside = std::to_string(allowed.back() + 1);
  EXPECT_NE(refusal({"--cpu-affinity", outside}).find("allowed"), std::string::npos);
  EXPECT_NE(refusal({"--cpu-affinity", "0,0"}).find("twice"), std::string::npos);
  EXPECT_NE(refusal({"--cpu-affinity", "zero"}).find("--cpu-affinity"), std::string::npos);
  EXPECT_NE(refusal({"--cpu-affinity", ""}).find("--cpu-affinity"), std::string::npos);
}

TEST(SchedCli, NewFieldsSurviveTheChildHandOver) {
  RunConfig c;
  c.schedule = Schedule::overlap;
  c.cpu_affinity = {3, 1};
  c.chunk_elems_sweep = {5, 9};
  c.sub_group_size_sweep = {11, 2};
  const RunConfig back = nlohmann::json(c).get<RunConfig>();
  EXPECT_EQ(back.schedule, Schedule::overlap);
  EXPECT_EQ(back.cpu_affinity, c.cpu_affinity);
  EXPECT_EQ(back.chunk_elems_sweep, c.chunk_elems_sweep);
  EXPECT_EQ(back.sub_group_size_sweep, c.sub_group_size_sweep);
  // A document from before these keys reads as the defaults.
  nlohmann::json old = c;
  for (const char* k : {"schedule", "cpu_affinity", "chunk_elems_sweep", "sub_group_size_sweep"}) {
    old.erase(k);
  }
  const RunConfig legacy = old.get<RunConfig>();
  EXPECT_EQ(legacy.schedule, RunConfig{}.schedule);
  EXPECT_TRUE(legacy.cpu_affinity.empty());
}

ArmResult arm(Arm a, double avg, const std::string& checksum, std::mt19937& rng) {
  ArmResult r;
  r.arm = a;
  r.ok = true;
  r.device = "cpu";
  r.steps = 1;
  r.step_avg_s = avg;
  r.step_min_s = avg;
  r.tokens_per_step = 8;
  r.param_checksum = checksum;
  r.schedule = "overlap";
  r.placement = {"numa-node 1", {4, 5}};
  r.bound = {0.1 + rng() % 100 / 1e3, 0.2, 0.01, 0.21, avg / 0.21};
  r.wall_s = 3.5;
  StepSample s;
  s.wall_s = avg;
  s.loss = 1.5f;
  r.samples.push_back(s);
  return r;
}

TEST(SchedReport, SweepTablesAndJson) {
  std::mt19937 rng(5);
  RunResult run;
  run.config.schedule = Schedule::overlap;
  const std::int64_t combos[4][2] = {{100, 1000}, {100, 50}, {300, 1000}, {300, 50}};
  for (int i = 0; i < 4; ++i) {
    SweepPoint p{combos[i][0], combos[i][1], {}};
    const double reg = 0.1 + i * 0.01, unreg = 0.3 + i * 0.02;
    p.arms.push_back(arm(Arm::registered, reg, "abc", rng));
    p.arms.push_back(arm(Arm::unregistered, unreg, "abc", rng));
    run.sweep.push_back(p);
  }
  run.arms = run.sweep[0].arms;
  run.config.chunk_elems = 100;
  run.config.sub_group_size = 1000;

  const std::string table = render_table(run);
  std::istringstream in(table);
  std::vector<std::string> headers;
  int speedups = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("chunk_elems=", 0) == 0) headers.push_back(line);
    speedups += line.rfind("speedup: ", 0) == 0;
  }
  ASSERT_EQ(headers.size(), 4u) << table;
  EXPECT_EQ(headers[1], "chunk_elems=100 sub_group_size=50");
  EXPECT_EQ(headers[2], "chunk_elems=300 sub_group_size=1000");
  EXPECT_EQ(speedups, 4);

  const auto j = nlohmann::json::parse(dump_json(driver_result_json(run)));
  ASSERT_EQ(j.at("sweep").size(), 4u);
  for (int i = 0; i < 4; ++i) {
    const auto& e = j.at("sweep")[static_cast<std::size_t>(i)];
    EXPECT_EQ(e.at("chunk_elems"), combos[i][0]);
    EXPECT_EQ(e.at("sub_group_size"), combos[i][1]);
    EXPECT_NEAR(e.at("speedup").get<double>(), (0.3 + i * 0.02) / (0.1 + i * 0.01), 1e-12);
    EXPECT_EQ(e.at("registered").at("schedule"), "overlap");
  }
  // The top level is the first combination (what older CI scripts read), every field; the
  // sweep's entries are compact: the same values for the keys they keep.
  for (const auto& [key, value] : j.at("sweep")[0].at("registered").items()) {
    if (key == "phases") continue;
    EXPECT_EQ(j.at("registered").at(key), value) << key;
  }
  for (const auto& [name, phase] : j.at("sweep")[0].at("registered").at("phases").items()) {
    EXPECT_EQ(j.at("registered").at("phases").at(name).at("host_s"), phase.at("host_s")) << name;
  }
  EXPECT_NEAR(j.at("speedup").get<double>(), 0.3 / 0.1, 1e-12);
  EXPECT_EQ(j.at("workload").at("schedule"), "overlap");
  const auto& reg = j.at("registered");
  EXPECT_EQ(reg.at("placement").at("policy"), "numa-node 1");
  EXPECT_EQ(reg.at("placement").at("cpus"), (std::vector<int>{4, 5}));
  for (const char* k : {"adam_s", "pcie_s", "compute_s", "bound_s", "ratio"}) {
    EXPECT_TRUE(reg.at("bound").contains(k)) << k;
  }
  EXPECT_DOUBLE_EQ(reg.at("wall_s").get<double>(), 3.5);
  EXPECT_TRUE(validate_arms(run).ok());

  // A disagreement in a later combination is found and named.
  run.sweep[3].arms[1].param_checksum = "def";
  const Validation v = validate_arms(run);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.first_difference.find("chunk_elems=300 sub_group_size=50"), std::string::npos)
      << v.first_difference;

  // Without a sweep the table has no header line and the sweep array one entry.
  RunResult plain;
  plain.arms = run.sweep[0].arms;
  EXPECT_EQ(render_table(plain).find("chunk_elems="), std::string::npos);
  const auto plain_doc = driver_result_json(plain);
  EXPECT_EQ(plain_doc.at("sweep").size(), 1u);
  // ... and that entry does not repeat the arms the top level already holds (issue 26: a
  // two-arm DRIVERRESULT was twice its size).
  for (const char* arm : {"registered", "unregistered"}) {
    EXPECT_TRUE(plain_doc.contains(arm)) << arm;
    EXPECT_FALSE(plain_doc.at("sweep")[0].contains(arm)) << arm;
  }
  EXPECT_TRUE(plain_doc.at("sweep")[0].contains("speedup"));
}

TEST(SchedReport, ArmResultRoundTripKeepsTheNewFields) {
  std::mt19937 rng(8);
  const ArmResult a = arm(Arm::registered, 0.25, "x", rng);
  ArmResult b = nlohmann::json(a).get<ArmResult>();
  EXPECT_EQ(b.schedule, a.schedule);
  EXPECT_EQ(b.placement.policy, a.placement.policy);
  EXPECT_EQ(b.placement.cpus, a.placement.cpus);
  EXPECT_DOUBLE_EQ(b.bound.adam_s, a.bound.adam_s);
  EXPECT_DOUBLE_EQ(b.bound.ratio, a.bound.ratio);
  EXPECT_DOUBLE_EQ(b.wall_s, a.wall_s);
}

}  // namespace
}  // namespace zob
