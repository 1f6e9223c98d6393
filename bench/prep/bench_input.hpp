// What the prep micro-benchmarks share: reading an input file whole (plain or gzip) and the
// calling thread's CPU time (the bench machines are shared; time spent descheduled is not work).
#pragma once
#include <zlib.h>

#include <ctime>
#include <string>

namespace smelt::bench {

inline bool read_any(const std::string& path, std::string& out) {
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) return false;
  out.clear();
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  gzclose(f);
  return n == 0;
}

inline double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + ts.tv_nsec * 1e-9;
}

}  // namespace smelt::bench
