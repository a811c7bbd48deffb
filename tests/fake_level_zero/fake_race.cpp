// Happens-before checking for the fake driver. Each command list carries a vector clock; a
// command joins the clocks of the events it waits for and of what the host had seen complete
// when it was appended. Two commands on different lists that touch overlapping bytes, one of
// them writing, race unless the earlier one's clock entry is covered by the later one's
// clock. Timing cannot hide such a bug here: a missing event wait is reported on every run,
// whichever worker happened to go first.
#include <algorithm>
#include <cstdio>
#include <deque>

#include "fake_state.hpp"

namespace fake_ze {
namespace {

struct Past {
  Access access;
  int list;
  std::uint64_t epoch;  // the list's own clock entry for the command
  std::string what;
};
std::deque<Past> g_past;  // under g_mutex
constexpr int kFreed = -1;  // the "list" of a range freed with commands pending

bool overlap(const Access& a, const Access& b) { return a.begin < b.end && b.begin < a.end; }

std::uint64_t entry(const Clock& c, int list) {
  auto it = c.find(list);
  return it == c.end() ? 0 : it->second;
}

std::string describe(const Past& p, const Access& a, int list, const std::string& what) {
  char buf[512];
  std::snprintf(buf, sizeof buf,
                "race: '%s' on list %d %s [%#zx, %#zx) while '%s' on list %d %s [%#zx, %#zx) "
                "and no event orders them (a missing wait or barrier)",
                what.c_str(), list, a.write ? "writes" : "reads", static_cast<std::size_t>(a.begin),
                static_cast<std::size_t>(a.end), p.what.c_str(), p.list,
                p.access.write ? "wrote" : "read", static_cast<std::size_t>(p.access.begin),
                static_cast<std::size_t>(p.access.end));
  return buf;
}

}  // namespace

void join(Clock& into, const Clock& from) {
  for (const auto& [list, n] : from) into[list] = std::max(into[list], n);
}

std::string race_check(const std::vector<Access>& accesses, int list, const Clock& now,
                       const std::string& what) {
  for (const Access& a : accesses) {
    for (const Past& p : g_past) {
      if (p.list == kFreed && overlap(p.access, a))
        return "'" + what + "' on list " + std::to_string(list) +
               " touches memory already given to zeMemFree (a queued command outlived its buffer)";
      if (p.list == list || !overlap(p.access, a) || !(p.access.write || a.write)) continue;
      if (p.epoch > entry(now, p.list)) return describe(p, a, list, what);
    }
  }
  const std::uint64_t epoch = entry(now, list);
  for (const Access& a : accesses) {
    if (a.begin == a.end) continue;
    // A later access by the same list to the same bytes supersedes an earlier one.
    std::erase_if(g_past, [&](const Past& p) {
      return p.list == list && p.access.begin >= a.begin && p.access.end <= a.end &&
             (a.write || !p.access.write);
    });
    g_past.push_back(Past{a, list, epoch, what});
  }
  return {};
}

std::string race_check_free(std::uintptr_t p, std::size_t bytes, const Clock& host) {
  const Access freed{p, p + bytes, true};
  for (const Past& past : g_past)
    if (overlap(past.access, freed) && past.epoch > entry(host, past.list))
      return "zeMemFree of [" + std::to_string(p) + ", +" + std::to_string(bytes) +
             ") while '" + past.what + "' on list " + std::to_string(past.list) +
             " may still use it (the host never waited for it)";
  std::erase_if(g_past, [&](const Past& past) { return overlap(past.access, freed); });
  return {};
}

void race_mark_freed(std::uintptr_t p, std::size_t bytes) {
  g_past.push_back(Past{Access{p, p + bytes, true}, kFreed, UINT64_MAX, "zeMemFree"});
}

void race_unmark_freed(std::uintptr_t p) {
  std::erase_if(g_past, [&](const Past& past) { return past.list == kFreed && past.access.begin == p; });
}

void race_forget(const Clock& host) {
  std::erase_if(g_past, [&](const Past& p) { return p.epoch <= entry(host, p.list); });
}

void race_forget_list(int list) {
  std::erase_if(g_past, [&](const Past& p) { return p.list == list; });
}

}  // namespace fake_ze
