// Learning-rate schedules (schedule.hpp): warmup, then cosine [Loshchilov & Hutter 2017],
// warmup-stable-decay [Hu et al. 2024] or constant.
#include "smelt/train/schedule.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

namespace smelt {

// The per-key ranges are [optim]'s field table's (train_config.cpp); here what they cannot say.
Status lr_schedule_validate(const LrSchedule& s) {
  if (!std::isfinite(s.lr)) return Status::error(fmt::format("[optim] lr = {}: must be a finite number", s.lr));
  if (s.min_lr > s.lr)
    return Status::error(fmt::format("[optim] min_lr = {}: must be in [0, lr = {}]", s.min_lr, s.lr));
  return Status::ok();
}

namespace {
double lr_plain(const LrSchedule& s, int64_t step, double peak, double floor) {
  if (step < s.warmup_steps) return peak * (double)(step + 1) / (double)s.warmup_steps;
  if (s.kind == ScheduleKind::kConstant) return peak;
  const int64_t total = std::max<int64_t>(s.total_steps, s.warmup_steps + 1);
  if (s.kind == ScheduleKind::kCosine) {
    double p = std::min(1.0, (double)(step - s.warmup_steps) / (double)(total - s.warmup_steps));
    return floor + 0.5 * (peak - floor) * (1.0 + std::cos(M_PI * p));
  }
  // wsd: stable at the peak, then a linear decay over the last decay_fraction of the run
  const int64_t decay = std::max<int64_t>(1, (int64_t)std::llround(s.decay_fraction * total));
  const int64_t start = std::max(s.warmup_steps, total - decay);
  if (step < start) return peak;
  double p = std::min(1.0, (double)(step - start) / (double)std::max<int64_t>(1, total - start));
  return peak + (floor - peak) * p;
}
}  // namespace

double lr_at(const LrSchedule& s, int64_t step) {
  if (s.restart_step >= 0 && step >= s.restart_step) {
    // A fresh schedule over the remaining steps, from a lower peak.
    LrSchedule r = s;
    r.total_steps = std::max<int64_t>(1, s.total_steps - s.restart_step);
    r.warmup_steps = std::min(s.warmup_steps, r.total_steps - 1);
    double peak = s.lr * s.restart_scale;
    return lr_plain(r, step - s.restart_step, peak, std::min(s.min_lr, peak));
  }
  return lr_plain(s, step, s.lr, s.min_lr);
}

}  // namespace smelt
