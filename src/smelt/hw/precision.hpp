// Precision: the number format the linear layers' GEMMs run in (fp32, or bf16 where the CPU has
// bf16 units). Below kernels/ so the CPU's peaks (cpu_info.hpp), the GEMM choice (machine/) and the
// model all name it; not a model size (model/config.hpp) nor a [train] reader (train/train_config).
#pragma once

namespace smelt {

// Numerics of the linear layers (a [train] choice, not part of the model: checkpoints hold fp32
// master weights either way and resume under the other). bf16: weights and activations rounded
// to bf16 at each GEMM's inputs, fp32 accumulation and outputs; norms, softmax, RoPE, attention,
// cross-entropy, gradients and AdamW stay fp32.
enum class Precision { kFp32, kBf16 };
inline const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

}  // namespace smelt
