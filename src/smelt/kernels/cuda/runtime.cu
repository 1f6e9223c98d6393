// Devices, memory, streams and timers of the CUDA backend (cuda_kernels.hpp): thin wrappers over
// the CUDA runtime so that code compiled without CUDA headers (the model, the tests) can use them.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
std::string error_text(cudaError_t e) {
  return e == cudaSuccess ? std::string() : std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}
}  // namespace

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: clear the sticky-free error
    return 0;
  }
  return n;
}

std::string device_name(int device) {
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, device) != cudaSuccess) return "";
  return p.name;
}

std::string set_device(int device) { return error_text(cudaSetDevice(device)); }

void* device_alloc(int64_t bytes) {
  void* p = nullptr;
  if (cudaMalloc(&p, bytes > 0 ? (size_t)bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}
void device_free(void* p) {
  if (p) (void)cudaFree(p);
}
void* host_alloc_pinned(int64_t bytes) {
  void* p = nullptr;
  if (cudaMallocHost(&p, bytes > 0 ? (size_t)bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    return nullptr;
  }
  return p;
}
void host_free_pinned(void* p) {
  if (p) (void)cudaFreeHost(p);
}

void copy_to_device(void* dst, const void* src, int64_t bytes, Stream s) {
  if (bytes > 0) (void)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
}
void copy_to_host(void* dst, const void* src, int64_t bytes, Stream s) {
  if (bytes > 0) (void)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s);
}
void copy_device(void* dst, const void* src, int64_t bytes, Stream s) {
  if (bytes > 0) (void)cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, s);
}
void memset_device(void* p, int value, int64_t bytes, Stream s) {
  if (bytes > 0) (void)cudaMemsetAsync(p, value, bytes, s);
}

Stream stream_create() {
  cudaStream_t s = nullptr;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) return nullptr;
  return s;
}
void stream_destroy(Stream s) {
  if (s) (void)cudaStreamDestroy(s);
}
std::string stream_sync(Stream s) {
  cudaError_t e = cudaStreamSynchronize(s);
  if (e == cudaSuccess) e = cudaGetLastError();
  return error_text(e);
}

struct Timer {
  cudaEvent_t a = nullptr, b = nullptr;
};
Timer* timer_create() {
  auto* t = new Timer;
  (void)cudaEventCreate(&t->a);
  (void)cudaEventCreate(&t->b);
  return t;
}
void timer_destroy(Timer* t) {
  if (!t) return;
  (void)cudaEventDestroy(t->a);
  (void)cudaEventDestroy(t->b);
  delete t;
}
void timer_start(Timer* t, Stream s) { (void)cudaEventRecord(t->a, s); }
double timer_stop_seconds(Timer* t, Stream s) {
  (void)cudaEventRecord(t->b, s);
  (void)cudaEventSynchronize(t->b);
  float ms = 0.0f;
  (void)cudaEventElapsedTime(&ms, t->a, t->b);
  return ms * 1e-3;
}

struct Marks {
  std::vector<cudaEvent_t> e;
};
Marks* marks_create(int n) {
  auto* m = new Marks;
  m->e.resize(n);
  for (auto& e : m->e) (void)cudaEventCreate(&e);
  return m;
}
void marks_destroy(Marks* m) {
  if (!m) return;
  for (auto& e : m->e) (void)cudaEventDestroy(e);
  delete m;
}
void marks_record(Marks* m, int i, Stream s) { (void)cudaEventRecord(m->e[i], s); }
float marks_ms(Marks* m, int i, int j) {
  float ms = 0.0f;
  (void)cudaEventElapsedTime(&ms, m->e[i], m->e[j]);
  return ms;
}

}  // namespace smelt::cuda
