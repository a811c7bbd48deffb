// Every report (stdout table, DRIVERRESULT line, --json file) is rendered from a RunResult and
// nothing else, so the text and the JSON can never disagree; the outputs themselves are the
// reporters of reporter.hpp.
#pragma once
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/arms.hpp"
#include "zob/result.hpp"

namespace zob {

inline constexpr int kSchemaVersion = 1;

// Agreement of the arms that completed: they differ only in the kind of host memory, so the
// numbers must be bit-identical.
struct Validation {
  bool checksums_equal = true;
  bool losses_equal = true;
  int compared_arms = 0;               // ok arms taken into account
  bool rounds_equal = true;            // every --repeats round of an arm agrees with its first
  std::string first_difference;        // "" when equal; else one line naming the step or checksum
  std::string first_round_difference;  // the first disagreement between rounds, or ""
  bool ok() const { return checksums_equal && losses_equal && rounds_equal; }
};
Validation validate_arms(const RunResult& run);

// The table of the run's --compat version (table.hpp), and the speedup line when it is
// computable. Ends with a newline.
std::string render_table(const RunResult& run);
// The DRIVERRESULT document (also what --json writes). Ordered: the Python script's keys come
// first, in its order ("registered", "unregistered", "speedup").
nlohmann::ordered_json driver_result_json(const RunResult& run);

// DRIVERRESULT's "workload", keys in the first schema's order (readers diff them): the
// settings zob/settings.hpp marks `workload`, each as the hand-over writes it, and what
// follows from them (model name, architecture, tokens_per_step, params). A unit test holds
// the two lists together.
inline constexpr const char* kWorkloadKeys[] = {"model",
                                                "architecture",
                                                "vocab",
                                                "hidden",
                                                "layers",
                                                "batch",
                                                "seq",
                                                "tokens_per_step",
                                                "params",
                                                "steps",
                                                "warmup",
                                                "loop",
                                                "chunk_elems",
                                                "sub_group_size",
                                                "seed",
                                                "gpus",
                                                "schedule",
                                                "decoder",
                                                "device_memory_bytes",
                                                "offload_ratio"};
inline constexpr const char* kWorkloadDerivedKeys[] = {"model", "architecture", "tokens_per_step",
                                                       "params", "decoder"};
nlohmann::ordered_json workload_json(const RunConfig& config);
// --schedule deepspeed with --model: {"embedding", "layer", "head": [forward, backward]}, the
// Device calls per step of one module of each kind (planned_device_ops); null otherwise.
nlohmann::ordered_json device_ops_plan_json(const RunConfig& config);
// Everything the run prints on stdout (every reporter's section, reporter.hpp), ending with
// "DRIVERRESULT=<one line of JSON>\n".
std::string render_stdout(const RunResult& run);

}  // namespace zob
