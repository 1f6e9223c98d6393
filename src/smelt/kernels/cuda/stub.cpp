// The CUDA backend's stand-in when the build has no CUDA compiler (cuda_kernels.hpp): it reports
// no device, and any op called anyway ends the process naming the op that is missing, so the tree
// builds and its tests run everywhere.
#include <cstdio>
#include <cstdlib>

#include "smelt/kernels/cuda/cuda_kernels.hpp"

namespace smelt::cuda {

namespace {
[[noreturn]] void missing(const char* op) {
  std::fprintf(stderr, "smelt: CUDA op %s called, but this build has no CUDA backend (configure with nvcc "
                       "on the PATH or -DSMELT_CUDA=ON)\n", op);
  std::abort();
}
}  // namespace

bool built() { return false; }
int device_count() { return 0; }
std::string device_name(int) { return ""; }
std::string set_device(int) { return "this build has no CUDA backend"; }
void* device_alloc(int64_t) { return nullptr; }
void device_free(void*) {}
void* host_alloc_pinned(int64_t) { return nullptr; }
void host_free_pinned(void*) {}
void copy_to_device(void*, const void*, int64_t, Stream) { missing("copy_to_device"); }
void copy_to_host(void*, const void*, int64_t, Stream) { missing("copy_to_host"); }
void copy_device(void*, const void*, int64_t, Stream) { missing("copy_device"); }
void memset_device(void*, int, int64_t, Stream) { missing("memset_device"); }
Stream stream_create() { return nullptr; }
void stream_destroy(Stream) {}
std::string stream_sync(Stream) { return "this build has no CUDA backend"; }
struct Timer {};
Timer* timer_create() { missing("timer_create"); }
void timer_destroy(Timer*) {}
void timer_start(Timer*, Stream) { missing("timer_start"); }
double timer_stop_seconds(Timer*, Stream) { missing("timer_stop_seconds"); }

struct Marks {};
Marks* marks_create(int) { missing("marks_create"); }
void marks_destroy(Marks*) {}
void marks_record(Marks*, int, Stream) { missing("marks_record"); }
float marks_ms(Marks*, int, int) { missing("marks_ms"); }

struct Blas {};
Blas* blas_create(Stream) { return nullptr; }
std::string blas_error() { return "this build has no CUDA backend"; }
void blas_destroy(Blas*) {}
void gemm_f32(Blas*, bool, bool, int, int, int, float, const float*, int, const float*, int, float, float*, int) {
  missing("gemm_f32");
}
void gemm_bf16(Blas*, bool, bool, int, int, int, const uint16_t*, int, const uint16_t*, int, float, float*, int) {
  missing("gemm_bf16");
}
void matmul_forward(Blas*, float*, const float*, const float*, int, int, int, float) { missing("matmul_forward"); }
void matmul_backward(Blas*, float*, float*, const float*, const float*, const float*, int, int, int) {
  missing("matmul_backward");
}
void matmul_forward_bf16(Blas*, float*, uint16_t*, const float*, const uint16_t*, int, int, int, float) {
  missing("matmul_forward_bf16");
}
void matmul_backward_bf16(Blas*, float*, float*, uint16_t*, uint16_t*, const float*, const float*, const uint16_t*,
                          int, int, int) {
  missing("matmul_backward_bf16");
}
void bf16_from_f32(uint16_t*, const float*, int64_t, Stream) { missing("bf16_from_f32"); }

void embedding_forward(float*, const int32_t*, const float*, int, int, int, Stream) { missing("embedding_forward"); }
void embedding_backward(float*, const float*, const int32_t*, const int32_t*, const int32_t*, int, int, Stream) {
  missing("embedding_backward");
}
void rmsnorm_forward(float*, float*, const float*, const float*, int, int, float, Stream) {
  missing("rmsnorm_forward");
}
int64_t rmsnorm_backward_scratch_floats(int, int) { return 0; }
void rmsnorm_backward(float*, float*, float*, const float*, const float*, const float*, const float*, int, int,
                      Stream) {
  missing("rmsnorm_backward");
}
void rope_forward(float*, const int32_t*, const float*, int, int, int, int, int, int, Stream) {
  missing("rope_forward");
}
void rope_backward(float*, const int32_t*, const float*, int, int, int, int, int, int, Stream) {
  missing("rope_backward");
}
void swiglu_forward(float*, const float*, int, int, Stream) { missing("swiglu_forward"); }
void swiglu_backward(float*, const float*, const float*, int, int, Stream) { missing("swiglu_backward"); }
void attention_forward(float*, float*, const float*, const int32_t*, int, int, int, int, int, Stream) {
  missing("attention_forward");
}
void attention_backward(float*, float*, const float*, const float*, const float*, const float*, const int32_t*, int,
                        int, int, int, int, Stream) {
  missing("attention_backward");
}
void attention_delta(float*, const float*, const float*, int, int, int, int, Stream) { missing("attention_delta"); }
bool attention_bf16_supported(int) { return false; }
void attention_forward_bf16(float*, float*, uint16_t*, const float*, const int32_t*, int, int, int, int, int, Stream) {
  missing("attention_forward_bf16");
}
void attention_backward_bf16(float*, float*, uint16_t*, uint16_t*, const float*, const float*, const float*,
                             const float*, const int32_t*, int, int, int, int, int, Stream) {
  missing("attention_backward_bf16");
}
void cross_entropy_forward(float*, float*, const float*, const int32_t*, int, int, Stream) {
  missing("cross_entropy_forward");
}
void cross_entropy_backward(float*, const float*, const int32_t*, float, int, int, Stream) {
  missing("cross_entropy_backward");
}
void softmax_entropy_rows(float*, const float*, const float*, const int32_t*, int, int, Stream) {
  missing("softmax_entropy_rows");
}
void adamw_step(float*, float*, float*, const float*, int64_t, float, float, float, float, float, float, int64_t,
                Stream) {
  missing("adamw_step");
}
int64_t grad_norm_scratch_doubles(int64_t) { return 0; }
double grad_norm_squared(const float*, int64_t, double*, double*, Stream) { missing("grad_norm_squared"); }

}  // namespace smelt::cuda
