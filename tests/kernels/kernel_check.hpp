// Shared helpers for the kernel tests: deterministic random tensors, error measures, and the
// central finite-difference gradient check. Not a test by itself.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace smelt::test {

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

// max |a-b| / max(1, max|b|): relative to the tensor's scale, absolute for tensors below 1.
inline double max_err(const float* a, const float* b, size_t n) {
  double m = 0, s = 1;
  for (size_t i = 0; i < n; i++) s = std::max(s, (double)std::fabs(b[i]));
  for (size_t i = 0; i < n; i++) m = std::max(m, (double)std::fabs(a[i] - b[i]));
  return m / s;
}
inline double max_err(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  return max_err(a.data(), b.data(), std::min(a.size(), b.size()));
}

// Checks analytic gradient `grad` of loss(x) against central differences at up to `samples`
// evenly spread coordinates of x. loss evaluates the fp32 kernel and sums in double; h = 1e-2
// keeps the fp32 rounding noise (~1e-7 * |loss| / h) far below the tolerance; the O(h^2)
// truncation error is ~1e-4 relative for these smooth ops. Tolerance: 2e-3 * max(1, |g|).
inline void check_fd(std::vector<float>& x, const std::vector<float>& grad,
                     const std::function<double()>& loss, int samples = 40, double h = 1e-2,
                     double tol = 2e-3) {
  size_t step = std::max<size_t>(1, x.size() / samples);
  for (size_t i = 0; i < x.size(); i += step) {
    float keep = x[i];
    x[i] = keep + (float)h;
    double lp = loss();
    x[i] = keep - (float)h;
    double lm = loss();
    x[i] = keep;
    double fd = (lp - lm) / (2 * h);
    EXPECT_NEAR(grad[i], fd, tol * std::max(1.0, std::fabs(fd))) << "coordinate " << i;
  }
}

// sum(out * w) in double: a scalar loss whose gradient w.r.t. out is w.
inline double dot_loss(const std::vector<float>& out, const std::vector<float>& w) {
  double s = 0;
  for (size_t i = 0; i < out.size(); i++) s += (double)out[i] * w[i];
  return s;
}

}  // namespace smelt::test
