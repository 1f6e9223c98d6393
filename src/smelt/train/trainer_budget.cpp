// The trainer's time budget ([train] time_budget_minutes, trainer_impl.hpp): the plan of the step
// count from the measured steps and evaluations. Not the first guess before any step (trainer_setup.cpp).
#include <algorithm>

#include <spdlog/spdlog.h>

#include "smelt/common/clock.hpp"
#include "smelt/train/trainer_impl.hpp"

namespace smelt::train_detail {

// The time budget's plan, made when 5% of the budget or 30 s is spent (and at least 3 steps): the
// steps left = 97% of the time left, less the evaluations still due and the final one, over the
// mean step time since the first step (which pays for first touches). The schedule is laid out
// over that count from then on. A plan made within warmup is made again, finally, at warmup's last
// step, from the longer mean and the evaluations after step 0's (the first plan, from a few steps
// and a cold evaluation, left a tenth of the budget unused on 2 cores); warmup does not depend on
// the count, so either way the run is the same as `train.steps = N` with the final N. A machine
// that slows down later meets the deadline first: the run then ends there, with its final
// evaluation and checkpoint, before the schedule's end.
void Trainer::plan_budget() {
  const double now = now_s();
  if (step_ == start_step_ + 1) first_step_end_s_ = now, eval_s_at_first_step_ = eval_s_sum_;
  if (budget_s_ <= 0) return;
  const double spent = now - run_start_s_;
  // The final evaluation (a busy machine makes it slower) and the checkpoint hand-off; the run
  // stops when one more step like the last would not end before them.
  const double reserve = 1.2 * last_eval_s_ + 1.0;
  if (spent + last_.step_ms / 1e3 + reserve >= budget_s_) out_of_time_ = true;
  const int64_t done_steps = step_ - start_step_;
  const int64_t warmup = sched_.warmup_steps;
  if (planned_) {
    if (final_plan_ || step_ != warmup || done_steps < planned_at_ - start_step_ + 5) {
      final_plan_ = final_plan_ || step_ >= warmup;
      return;
    }
  } else if (done_steps < 3 || spent < std::min(30.0, 0.05 * budget_s_)) {
    return;
  }
  // A step's time without the evaluations that came between (the plan adds those on their own).
  plan_step_s_ = (now - first_step_end_s_ - (eval_s_sum_ - eval_s_at_first_step_)) / (double)(done_steps - 1);
  const double eval_s = warm_evals_ > 0 ? warm_eval_s_ / warm_evals_ : last_eval_s_;
  const double left = 0.97 * (budget_s_ - spent) - reserve;
  // The evaluations still due: points spread over the planned steps, one every `every` steps.
  double n = 0;
  if (!c_.eval.evaluates()) n = left / plan_step_s_;
  else if (c_.eval.every > 0) n = left / (plan_step_s_ + eval_s / c_.eval.every);
  else {
    const double done_share = planned_ ? (double)step_ / (double)total_steps_ : 0.0;
    n = (left - c_.eval.points * (1 - done_share) * eval_s) / plan_step_s_;
  }
  int64_t total = step_ + std::max<int64_t>(1, (int64_t)n);
  if (c_.train.steps > 0) total = std::min(total, c_.train.steps);
  const bool again = planned_;
  total_steps_ = sched_.total_steps = total;
  planned_ = true;
  // no re-plan at warmup's end will come for a plan whose steps end before warmup's does, nor for
  // one made fewer than 5 steps before that end (too few new steps to measure)
  final_plan_ = again || step_ >= warmup || total <= warmup || step_ + 5 > warmup;
  planned_at_ = step_;
  if (total <= warmup && !again)
    spdlog::warn("time budget: the {} steps it allows end inside the {}-step warmup, so the learning rate never "
                 "decays; a smaller optim.warmup_steps (or a longer budget) fits the schedule in",
                 total, warmup);
  spdlog::info("time budget {:g} min: {} steps planned at step {}{} ({:.0f} ms a step, evaluations {:.1f} s each, "
               "{:.0f} s left)", c_.train.time_budget_minutes, total, step_, again ? " (warmup's end: final)" : "",
               plan_step_s_ * 1e3, eval_s, left);
  event({{"step", step_}, {"event", "time_budget_plan"}, {"total_steps", total}, {"step_ms", plan_step_s_ * 1e3},
         {"eval_s", eval_s}, {"final", final_plan_}});
}

}  // namespace smelt::train_detail
