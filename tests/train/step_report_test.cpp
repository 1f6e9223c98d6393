// The run's summary against its MFU denominator: the rate measured at the start, the one measured
// again at the end when the steps beat it, and the cap where no measurement reached the steps'
// rate; each said in the text and in summary.json's timing.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "smelt/train/step_report.hpp"

using json = nlohmann::json;
using namespace smelt;

namespace {

struct Facts {
  GemmChoice gemm;
  MemoryPlan plan;
  RunFacts f;
  Facts() {
    gemm.gflops = 100;
    f.run_dir = "run";
    f.steps = 10, f.total_steps = 10;
    f.tokens = f.tokens_this_run = 100000;
    f.first_loss = 9, f.last_loss = 5;
    f.sum_step_ms = 1000;            // 100k tokens/s
    f.flops_per_token = 1.5e6;       // the steps reached 150 GFLOP/s
    f.seconds = 1;
    f.gemm = &gemm;
    f.plan = &plan;
    f.precision = "fp32";
  }
};

TEST(StepReport, MfuAgainstTheStartsMeasurement) {
  Facts x;
  x.f.gemm_gflops = x.f.gemm_gflops_start = 300;
  TrainSummary out;
  run_summary(x.f, out);
  EXPECT_DOUBLE_EQ(out.mfu, 0.5);
  EXPECT_DOUBLE_EQ(out.sgemm_gflops, 300);
  EXPECT_EQ(out.text.find("measured again"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("cap"), std::string::npos) << out.text;
  const json& tm = out.json["timing"];
  EXPECT_DOUBLE_EQ(tm["gemm_gflops_start"].get<double>(), 300);
  EXPECT_TRUE(tm["gemm_gflops_end"].is_null());
}

TEST(StepReport, TheEndsMeasurementIsTheDenominatorAndBothAreSaid) {
  Facts x;
  x.f.gemm_gflops_start = 120;  // read low at the start: the steps reached 150
  x.f.gemm_gflops_end = 200;
  x.f.gemm_gflops = 200;
  TrainSummary out;
  run_summary(x.f, out);
  EXPECT_DOUBLE_EQ(out.mfu, 0.75);
  EXPECT_DOUBLE_EQ(out.sgemm_gflops, 200);
  EXPECT_NE(out.text.find("measured again at the end: 200.0 GFLOP/s (the start's 120.0 was below the 150.0"),
            std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("cap"), std::string::npos) << out.text;
  const json& tm = out.json["timing"];
  EXPECT_DOUBLE_EQ(tm["gemm_gflops"].get<double>(), 200);
  EXPECT_DOUBLE_EQ(tm["gemm_gflops_start"].get<double>(), 120);
  EXPECT_DOUBLE_EQ(tm["gemm_gflops_end"].get<double>(), 200);
}

TEST(StepReport, AStepRateAboveEveryMeasurementIsCappedAndSaid) {
  Facts x;
  x.f.gemm_gflops = x.f.gemm_gflops_start = 120;  // not measured again (configured, or no room)
  TrainSummary out;
  run_summary(x.f, out);
  EXPECT_DOUBLE_EQ(out.mfu, 1.0);
  EXPECT_DOUBLE_EQ(out.sgemm_gflops, 150);
  EXPECT_NE(out.text.find("the steps reached 150.0 GFLOP/s, above the GEMM rate measured (120.0): MFU shows its "
                          "100% cap"), std::string::npos) << out.text;
  EXPECT_TRUE(out.json["timing"]["gemm_gflops_end"].is_null());
}

}  // namespace

// The status line's eta: the pace so far, but never past the time budget. A first status line
// after a slow start-up once read "step 1/407? ... eta 37m38s" inside a 7.5-minute budget.
TEST(StepReport, EtaNeverPassesTheTimeBudget) {
  EXPECT_DOUBLE_EQ(eta_seconds(10, 2, 8, 0), 40);        // no budget: the pace
  EXPECT_DOUBLE_EQ(eta_seconds(5.5, 1, 406, 450), 444.5);  // the slow first step: the budget left
  EXPECT_DOUBLE_EQ(eta_seconds(100, 100, 50, 450), 50);   // a pace inside the budget stands
  EXPECT_DOUBLE_EQ(eta_seconds(3, 0, 400, 450), 447);     // no step yet: the budget left
  EXPECT_DOUBLE_EQ(eta_seconds(3, 0, 400, 0), -1);        // nothing tells
  EXPECT_DOUBLE_EQ(eta_seconds(500, 10, 5, 450), 0);      // past the budget: the run is ending
  EXPECT_EQ(duration_str(eta_seconds(5.5, 1, 406, 450)), "7m24s");
}
