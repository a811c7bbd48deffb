// Happens-before checking for the fake driver. A command knows complete what the barriers
// before it on its list completed, what the events it (or an earlier command of its list)
// waited for knew, and what the host had seen complete when it was appended (fake_queue.cpp).
// Two commands that touch overlapping bytes, one of them writing, race unless one is known
// complete to the other: on two lists as on one, since a list completes out of order unless
// a barrier orders it. Timing cannot hide such a bug here: a missing barrier or wait is
// reported on every run, whichever command happened to run first.
#include <algorithm>
#include <cstdio>
#include <deque>
#include <set>

#include "fake_state.hpp"

namespace fake_ze {
namespace {

struct Past {
  Access access;
  int list;
  std::uint64_t epoch;  // the command's number on its list
  std::string what;
};
std::deque<Past> g_past;  // under g_mutex
// Commands appended and not yet run or dropped, by append number; and what the host saw
// complete, each to be forgotten once no command appended up to `appended` is left.
std::uint64_t g_appends = 0;
std::set<std::uint64_t> g_unrun;
struct Forget {
  Clock host;
  std::uint64_t appended;
};
std::deque<Forget> g_forgets;
constexpr int kFreed = -1;  // the "list" of a range freed with commands pending

bool overlap(const Access& a, const Access& b) { return a.begin < b.end && b.begin < a.end; }

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

// Forgets what the host saw complete, up to the oldest command not yet run.
void apply_forgets() {
  const std::uint64_t oldest_unrun = g_unrun.empty() ? UINT64_MAX : *g_unrun.begin();
  while (!g_forgets.empty() && g_forgets.front().appended < oldest_unrun) {
    const Clock& host = g_forgets.front().host;
    std::erase_if(g_past,
                  [&](const Past& p) { return p.list != kFreed && covers(host, p.list, p.epoch); });
    g_forgets.pop_front();
  }
}

}  // namespace

bool covers(const Clock& c, int list, std::uint64_t seq) {
  auto it = c.prefix.find(list);
  if (it != c.prefix.end() && seq <= it->second) return true;
  return c.singles.contains({list, seq});
}

void join(Clock& into, const Clock& from) {
  for (const auto& [list, n] : from.prefix) into.prefix[list] = std::max(into.prefix[list], n);
  for (const auto& single : from.singles)
    if (!covers(into, single.first, single.second)) into.singles.insert(single);
}

std::string race_check(const std::vector<Access>& accesses, int list, std::uint64_t seq,
                       const Clock& now, const std::string& what) {
  auto ordered_before = [&](const Past& p) {
    return (p.list == list && p.epoch == seq) || covers(now, p.list, p.epoch);
  };
  for (const Access& a : accesses) {
    for (const Past& p : g_past) {
      if (p.list == kFreed && overlap(p.access, a))
        return "'" + what + "' on list " + std::to_string(list) +
               " touches memory already given to zeMemFree (a queued command outlived its buffer)";
      if (!overlap(p.access, a) || !(p.access.write || a.write)) continue;
      if (!ordered_before(p)) return describe(p, a, list, what);
    }
  }
  for (const Access& a : accesses) {
    if (a.begin == a.end) continue;
    // An access ordered after an earlier one to the same bytes supersedes it: whatever is
    // unordered with the earlier one is unordered with this one too (or ordered after both).
    std::erase_if(g_past, [&](const Past& p) {
      return p.list != kFreed && ordered_before(p) && p.access.begin >= a.begin &&
             p.access.end <= a.end && (a.write || !p.access.write);
    });
    g_past.push_back(Past{a, list, seq, what});
  }
  return {};
}

std::string race_check_free(std::uintptr_t p, std::size_t bytes, const Clock& host) {
  const Access freed{p, p + bytes, true};
  for (const Past& past : g_past)
    if (overlap(past.access, freed) && !covers(host, past.list, past.epoch))
      return "zeMemFree of [" + std::to_string(p) + ", +" + std::to_string(bytes) + ") while '" +
             past.what + "' on list " + std::to_string(past.list) +
             " may still use it (the host never waited for it)";
  std::erase_if(g_past, [&](const Past& past) { return overlap(past.access, freed); });
  return {};
}

void race_mark_freed(std::uintptr_t p, std::size_t bytes) {
  g_past.push_back(Past{Access{p, p + bytes, true}, kFreed, UINT64_MAX, "zeMemFree"});
}

void race_unmark_freed(std::uintptr_t p) {
  std::erase_if(g_past,
                [&](const Past& past) { return past.list == kFreed && past.access.begin == p; });
}

std::uint64_t race_appended() {
  g_unrun.insert(++g_appends);
  return g_appends;
}

void race_retired(std::uint64_t number) {
  g_unrun.erase(number);
  apply_forgets();
}

void race_forget(const Clock& host) {
  g_forgets.push_back(Forget{host, g_appends});
  apply_forgets();
}

void race_forget_list(int list) {
  std::erase_if(g_past, [&](const Past& p) { return p.list == list; });
}

}  // namespace fake_ze
