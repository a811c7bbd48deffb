// The one table of schedule cases (schedule_case.hpp): a new schedule is its case's file and
// one line here.
#include <stdexcept>
#include <string>

#include "step/schedule_case.hpp"

namespace zob::step_detail {

// Each defined in its case's file (schedule_NAME.cpp).
const ScheduleCase& stock_schedule();
const ScheduleCase& overlap_schedule();
const ScheduleCase& deepspeed_schedule();

std::span<const ScheduleCase* const> schedule_cases() {
  // Built on first use: the cases are function-local statics of their files.
  static const ScheduleCase* const kScheduleCases[] = {
      &stock_schedule(),
      &overlap_schedule(),
      &deepspeed_schedule(),
  };
  return kScheduleCases;
}

const ScheduleCase& schedule_case(Schedule schedule) {
  for (const ScheduleCase* c : schedule_cases()) {
    if (c->id() == schedule) return *c;
  }
  throw std::logic_error("no case for schedule " + std::to_string(static_cast<int>(schedule)));
}

}  // namespace zob::step_detail
