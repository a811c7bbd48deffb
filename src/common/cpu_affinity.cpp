// CPU lists and the placement of the Adam threads (cpu_affinity.hpp).
#include "zob/cpu_affinity.hpp"

#include <sched.h>

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <stdexcept>

#include "zob/errors.hpp"
#include "zob/text.hpp"

namespace zob {

namespace {

constexpr int kMaxCpu = 65535;

std::string trim(const std::string& s) {
  std::size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return s.substr(b, e - b);
}

int parse_cpu(const std::string& text, const std::string& what, const std::string& whole) {
  if (text.empty() || text.size() > 5 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    throw UsageError(what + " '" + whole + "': '" + text +
                     "' is not a CPU number; give e.g. "
                     "0-7,16-23");
  }
  const int v = std::stoi(text);
  if (v > kMaxCpu) {
    throw UsageError(what + " '" + whole + "': CPU " + text + " is above " +
                     std::to_string(kMaxCpu));
  }
  return v;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text, const std::string& what) {
  const std::string whole = trim(text);
  if (whole.empty()) throw UsageError(what + " is empty; give CPUs such as 0-7,16-23");
  std::vector<int> out;
  std::set<int> seen;
  for (const std::string& item : split_list(whole)) {
    if (item.empty()) {
      throw UsageError(what + " '" + whole + "' has an empty item; give CPUs such as 0-7,16-23");
    }
    const std::size_t dash = item.find('-');
    int lo = 0, hi = 0;
    if (dash == std::string::npos) {
      lo = hi = parse_cpu(item, what, whole);
    } else {
      lo = parse_cpu(item.substr(0, dash), what, whole);
      hi = parse_cpu(item.substr(dash + 1), what, whole);
      if (hi < lo) {
        throw UsageError(what + " '" + whole + "': range " + item +
                         " runs backwards; write it "
                         "low-high");
      }
    }
    for (int c = lo; c <= hi; ++c) {
      if (!seen.insert(c).second) {
        throw UsageError(what + " '" + whole + "' lists CPU " + std::to_string(c) +
                         " twice; list each CPU once (one Adam thread per CPU)");
      }
      out.push_back(c);
    }
  }
  return out;
}

std::string format_cpu_list(const std::vector<int>& cpus) {
  std::string out;
  for (std::size_t i = 0; i < cpus.size();) {
    std::size_t j = i;
    while (j + 1 < cpus.size() && cpus[j + 1] == cpus[j] + 1) ++j;
    if (!out.empty()) out += ',';
    out += std::to_string(cpus[i]);
    if (j > i) out += '-' + std::to_string(cpus[j]);
    i = j + 1;
  }
  return out;
}

std::vector<int> allowed_cpu_list() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> out;
  if (sched_getaffinity(0, sizeof set, &set) != 0) return out;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) out.push_back(c);
  }
  return out;
}

std::vector<int> numa_node_cpus(int node, const std::string& sysfs) {
  if (node < 0) return {};
  std::ifstream in(sysfs + "/devices/system/node/node" + std::to_string(node) + "/cpulist");
  std::string line;
  if (!in || !std::getline(in, line) || trim(line).empty()) return {};
  try {
    return parse_cpu_list(line, "cpulist of NUMA node " + std::to_string(node));
  } catch (const UsageError&) {
    return {};  // an unreadable sysfs file means "unknown", not a user error
  }
}

int pci_numa_node(const std::string& pci_bus_id, const std::string& sysfs) {
  // CUDA spells it "00000000:3B:00.0"; sysfs "0000:3b:00.0".
  std::string id;
  for (char c : trim(pci_bus_id))
    id += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const std::size_t colon = id.find(':');
  if (id.empty() || colon == std::string::npos || id.find('/') != std::string::npos) return -1;
  if (id.find(':', colon + 1) != std::string::npos && colon > 4) id.erase(0, colon - 4);
  else if (id.find(':', colon + 1) == std::string::npos) id = "0000:" + id;  // "3b:00.0"
  std::ifstream in(sysfs + "/bus/pci/devices/" + id + "/numa_node");
  int node = -1;
  if (!(in >> node)) return -1;
  return node;
}

void validate_cpu_affinity(const std::vector<int>& cpus, int threads,
                           const std::vector<int>& allowed) {
  if (cpus.empty()) return;
  const std::string list = format_cpu_list(cpus);
  if (static_cast<int>(cpus.size()) < threads) {
    throw UsageError("--cpu-affinity " + list + " names " + std::to_string(cpus.size()) +
                     " CPUs for " + std::to_string(threads) +
                     " Adam threads; give at least "
                     "--threads CPUs or lower --threads");
  }
  const std::set<int> ok(allowed.begin(), allowed.end());
  for (int c : cpus) {
    if (!ok.count(c)) {
      throw UsageError("--cpu-affinity " + list + ": CPU " + std::to_string(c) +
                       " is not in this process's allowed set (" + format_cpu_list(allowed) +
                       "); choose CPUs from it");
    }
  }
}

ThreadPlacement choose_placement(const std::vector<int>& cpu_affinity, int threads,
                                 const DeviceInfo& info, const std::vector<int>& allowed,
                                 std::string* notice, const std::string& sysfs) {
  ThreadPlacement p;
  if (!cpu_affinity.empty()) {
    validate_cpu_affinity(cpu_affinity, threads, allowed);
    p.policy = "cpu-affinity";
    p.cpus.assign(cpu_affinity.begin(), cpu_affinity.begin() + threads);
    return p;
  }
  const int node = device_numa_node(info, sysfs);
  if (node < 0) return p;
  const std::vector<int> node_cpus = numa_node_cpus(node, sysfs);
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::vector<int> usable;
  for (int c : node_cpus) {
    if (ok.count(c)) usable.push_back(c);
  }
  if (usable.empty()) {
    if (notice != nullptr) {
      *notice = "the device is on NUMA node " + std::to_string(node) + " but none of its CPUs (" +
                (node_cpus.empty() ? std::string("unknown") : format_cpu_list(node_cpus)) +
                ") is allowed to this process; Adam threads left unpinned";
    }
    return p;
  }
  p.policy = "numa-node " + std::to_string(node);
  for (int i = 0; i < threads; ++i)
    p.cpus.push_back(usable[static_cast<std::size_t>(i) % usable.size()]);
  if (notice != nullptr && static_cast<std::size_t>(threads) > usable.size()) {
    *notice = std::to_string(threads) + " Adam threads on the " + std::to_string(usable.size()) +
              " allowed CPUs of NUMA node " + std::to_string(node) +
              ": some CPUs run two; lower --threads or give --cpu-affinity";
  }
  return p;
}

int device_numa_node(const DeviceInfo& info, const std::string& sysfs) {
  if (info.numa_node >= 0) return info.numa_node;
  if (info.pci_bus_id.empty()) return -1;
  return pci_numa_node(info.pci_bus_id, sysfs);
}

std::vector<int> cpu_slice(const std::vector<int>& cpus, int parts, int index,
                           std::string* notice) {
  if (parts < 1 || index < 0 || index >= parts) {
    throw std::invalid_argument(
        fmt::format("cpu_slice: part {} of {} does not exist", index, parts));
  }
  if (cpus.empty()) return {};
  const std::size_t n = cpus.size();
  const auto p = static_cast<std::size_t>(parts);
  const auto i = static_cast<std::size_t>(index);
  if (p > n) {
    if (notice != nullptr) {
      *notice = fmt::format(
          "{} ranks share the {} CPUs {}: each rank gets one CPU, shared "
          "round-robin, so some CPUs run two ranks' Adam threads",
          parts, n, format_cpu_list(cpus));
    }
    return {cpus[i % n]};
  }
  const std::size_t base = n / p, extra = n % p;
  const std::size_t begin = i * base + std::min(i, extra);
  const std::size_t len = base + (i < extra ? 1 : 0);
  return {cpus.begin() + static_cast<std::ptrdiff_t>(begin),
          cpus.begin() + static_cast<std::ptrdiff_t>(begin + len)};
}

void validate_rank_cpu_affinity(const std::vector<int>& cpus, int ranks,
                                const std::vector<int>& allowed) {
  if (cpus.empty()) return;
  if (cpus.size() < static_cast<std::size_t>(std::max(ranks, 1))) {
    throw UsageError(
        fmt::format("--cpu-affinity {} names {} CPU{} for --gpus {}: each rank takes "
                    "its own part of the list; give at least {} CPUs or lower --gpus",
                    format_cpu_list(cpus), cpus.size(), cpus.size() == 1 ? "" : "s", ranks, ranks));
  }
  validate_cpu_affinity(cpus, 0, allowed);
}

namespace {

// Node -> its CPUs this process may use, for every node of node_of_rank that has any.
std::map<int, std::vector<int>> usable_node_cpus(const std::vector<int>& node_of_rank,
                                                 const std::vector<int>& allowed,
                                                 const std::string& sysfs) {
  const std::set<int> ok(allowed.begin(), allowed.end());
  std::map<int, std::vector<int>> out;
  for (int node : node_of_rank) {
    if (node < 0 || out.count(node)) continue;
    std::vector<int> usable;
    for (int c : numa_node_cpus(node, sysfs)) {
      if (ok.count(c)) usable.push_back(c);
    }
    if (!usable.empty()) out.emplace(node, std::move(usable));
  }
  return out;
}

// Without --cpu-affinity: the ranks whose device's node has allowed CPUs split those CPUs;
// the others split the allowed CPUs of no such node (all allowed CPUs when none are left).
// Every rank computes the same groups from the same inputs, so the slices are disjoint.
// Empty when the allowed CPUs are unknown.
std::vector<int> node_group_slice(int rank, const std::vector<int>& node_of_rank,
                                  const std::vector<int>& allowed, const std::string& sysfs,
                                  std::vector<std::string>& notes, std::string& policy) {
  const int ranks = static_cast<int>(node_of_rank.size());
  const std::map<int, std::vector<int>> usable = usable_node_cpus(node_of_rank, allowed, sysfs);
  auto group = [&](int r) {
    const int node = node_of_rank[static_cast<std::size_t>(r)];
    return usable.count(node) ? node : -1;
  };
  const int mine = group(rank);
  int index = 0, members = 0;
  for (int r = 0; r < ranks; ++r) {
    if (group(r) != mine) continue;
    if (r < rank) ++index;
    ++members;
  }
  std::vector<int> candidates;
  if (mine >= 0) {
    candidates = usable.at(mine);
  } else {
    const int node = node_of_rank[static_cast<std::size_t>(rank)];
    if (node >= 0) {
      notes.push_back(
          fmt::format("the device is on NUMA node {} but none of its CPUs is "
                      "allowed to this process; the rank's Adam threads use "
                      "allowed CPUs of no rank's node",
                      node));
    }
    std::set<int> taken;
    for (const auto& [n, cpus] : usable) taken.insert(cpus.begin(), cpus.end());
    for (int c : allowed) {
      if (!taken.count(c)) candidates.push_back(c);
    }
    if (candidates.empty()) candidates = allowed;
  }
  if (candidates.empty()) return {};
  std::string line;
  std::vector<int> slice = cpu_slice(candidates, members, index, &line);
  if (!line.empty()) notes.push_back(line);
  policy = (mine >= 0 ? fmt::format("numa-node {}, ", mine) : std::string()) +
           fmt::format("rank slice {}/{}", index, members);
  return slice;
}

}  // namespace

ThreadPlacement choose_rank_placement(const std::vector<int>& cpu_affinity, int threads, int rank,
                                      const std::vector<int>& node_of_rank,
                                      const std::vector<int>& allowed, std::string* notice,
                                      const std::string& sysfs) {
  const int ranks = static_cast<int>(node_of_rank.size());
  if (rank < 0 || rank >= ranks || threads < 0) {
    throw std::invalid_argument(
        fmt::format("choose_rank_placement: rank {} of {}, {} threads", rank, ranks, threads));
  }
  std::vector<std::string> notes;
  ThreadPlacement p;
  std::vector<int> slice;
  if (!cpu_affinity.empty()) {
    validate_rank_cpu_affinity(cpu_affinity, ranks, allowed);
    slice = cpu_slice(cpu_affinity, ranks, rank);
    p.policy = fmt::format("cpu-affinity, rank slice {}/{}", rank, ranks);
  } else {
    slice = node_group_slice(rank, node_of_rank, allowed, sysfs, notes, p.policy);
    if (slice.empty()) {  // sched_getaffinity failed: nothing known to pin to
      if (notice != nullptr) *notice = "the allowed CPUs are unknown; Adam threads left unpinned";
      return p;
    }
  }
  const std::size_t count = threads > 0 ? static_cast<std::size_t>(threads) : slice.size();
  for (std::size_t t = 0; t < count; ++t) p.cpus.push_back(slice[t % slice.size()]);
  if (count > slice.size()) {
    notes.push_back(
        fmt::format("{} Adam threads on the {} CPUs of this rank's slice ({}): some "
                    "CPUs run two; lower --threads",
                    count, slice.size(), format_cpu_list(slice)));
  }
  if (notice != nullptr) {
    notice->clear();
    for (const std::string& n : notes) *notice += (notice->empty() ? "" : "; ") + n;
  }
  return p;
}

}  // namespace zob
