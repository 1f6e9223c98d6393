// Learning-rate schedules: linear warmup, then cosine decay, warmup-stable-decay (WSD) or constant.
// A pure function of the step, so a resumed run recomputes the same rate. Not the optimizer
// (train/optimizer.hpp applies AdamW with the rate given).
#pragma once
#include <cstdint>
#include <span>

#include "smelt/common/enum_names.hpp"
#include "smelt/common/status.hpp"

namespace smelt {

enum class ScheduleKind { kCosine, kWsd, kConstant };
inline constexpr EnumName<ScheduleKind> kScheduleKindNames[] = {
    {ScheduleKind::kCosine, "cosine"}, {ScheduleKind::kWsd, "wsd"}, {ScheduleKind::kConstant, "constant"}};
inline std::span<const EnumName<ScheduleKind>> enum_names(ScheduleKind) { return kScheduleKindNames; }

struct LrSchedule {
  ScheduleKind kind = ScheduleKind::kCosine;
  double lr = 3e-4;             // peak rate, reached at the end of warmup
  double min_lr = 3e-5;         // cosine and WSD end here
  int64_t warmup_steps = 100;   // linear from lr/warmup_steps at step 0 up to lr
  int64_t total_steps = 1000;   // the step count the decay is laid out over
  double decay_fraction = 0.2;  // WSD: the last fraction of total_steps decays linearly to min_lr
  int64_t restart_step = -1;    // >= 0: the schedule restarts at this step (entropy-collapse rule)
  double restart_scale = 0.3;   //        with peak lr * restart_scale
};

Status lr_schedule_validate(const LrSchedule& s);
// The rate for optimizer step `step` (0-based).
double lr_at(const LrSchedule& s, int64_t step);

}  // namespace smelt
