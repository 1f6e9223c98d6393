// The decoder's forward and backward on the CUDA kernels, mirroring model.cpp op for op (the CPU
// model is the reference the tests hold this to), over one planned device allocation.
#include "smelt/model/cuda/cuda_model.hpp"

#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "smelt/kernels/kernels.hpp"
#include "smelt/model/model.hpp"

namespace smelt {

namespace {
constexpr int64_t kAlign = 256;
// Op families of the profile (CudaModel::set_profiling), in step order.
enum ProfOp {
  kPEmbedF, kPNormF, kPQkvF, kPRopeF, kPAttnF, kPOF, kPGateUpF, kPSwigluF, kPDownF, kPCopyF, kPHeadF, kPCeF, kPCeB,
  kPHeadB, kPNormB, kPDownB, kPSwigluB, kPGateUpB, kPOB, kPAttnB, kPRopeB, kPQkvB, kPEmbedB, kPBf16W, kPOptim, kPCount
};
const char* const kProfNames[kPCount] = {
  "fwd embedding", "fwd rmsnorm", "fwd qkv matmul", "fwd rope", "fwd attention", "fwd o matmul", "fwd gate_up matmul",
  "fwd swiglu", "fwd down matmul", "fwd residual copy", "fwd lm_head matmul", "fwd cross-entropy", "bwd cross-entropy",
  "bwd lm_head matmul", "bwd rmsnorm", "bwd down matmul", "bwd swiglu", "bwd gate_up matmul", "bwd o matmul",
  "bwd attention", "bwd rope", "bwd qkv matmul", "bwd embedding", "bf16 weight copy", "clip + AdamW"};
constexpr int kMaxMarks = 4096;
}

CudaModel::~CudaModel() {
  if (marks_) cuda::marks_destroy(marks_);
  if (blas_) cuda::blas_destroy(blas_);
  if (base_) cuda::device_free(base_);
  if (stream_) cuda::stream_destroy(stream_);
}

void* CudaModel::carve(const char* name, int64_t count, int64_t bytes_each) {
  const int64_t size = (count * bytes_each + kAlign - 1) / kAlign * kAlign;
  void* p = base_ ? base_ + at_ : nullptr;
  if (!base_) slices_.emplace_back(name, size);
  at_ += size;
  return p;
}

// Every device buffer of a step, in one table: run once to size the allocation, once to carve it.
void CudaModel::plan_buffers() {
  const ModelConfig& c = cfg_;
  const int64_t N = (int64_t)Bmax_ * Tmax_, C = c.d_model, H = c.ffn_hidden, NH = c.n_heads, V = c.vocab_size;
  const int64_t QKV = c.qkv_size(), A = NH * c.head_size(), total = layout_.total;
  at_ = 0;
  auto f32 = [&](const char* name, int64_t n) { return static_cast<float*>(carve(name, n, 4)); };
  auto i32 = [&](const char* name, int64_t n) { return static_cast<int32_t*>(carve(name, n, 4)); };
  params_ = f32("parameters", total);
  grads_ = f32("gradients", total);
  m_ = f32("AdamW first moments", total);
  v_ = f32("AdamW second moments", total);
  if (precision_ == Precision::kBf16) {
    w16_ = static_cast<uint16_t*>(carve("bf16 weights", total, 2));
    x16_ = static_cast<uint16_t*>(carve("bf16 GEMM inputs", N * std::max({C, A, H}), 2));
    d16_ = static_cast<uint16_t*>(carve("bf16 output gradients", N * std::max({QKV, C, 2 * H, V}), 2));
  }
  if (attn16_) {
    qkv16_ = static_cast<uint16_t*>(carve("bf16 attention operands", N * QKV, 2));
    dout16_ = static_cast<uint16_t*>(carve("bf16 attention operands", N * A, 2));
  }
  resid_.assign(c.n_layers + 1, nullptr);
  for (auto& r : resid_) r = f32("residual stream", N * C);
  layers_.assign(c.n_layers, LayerBufs{});
  for (LayerBufs& a : layers_) {
    a.ln1 = f32("layer activations", N * C);
    a.rstd1 = f32("layer activations", N);
    a.qkv = f32("layer activations", N * QKV);
    a.att = f32("layer activations", N * A);
    a.lse = f32("layer activations", N * NH);
    a.xmid = f32("layer activations", N * C);
    a.ln2 = f32("layer activations", N * C);
    a.rstd2 = f32("layer activations", N);
    a.gu = f32("layer activations", N * 2 * H);
    a.sw = f32("layer activations", N * H);
  }
  lnf_ = f32("final norm", N * C);
  rstdf_ = f32("final norm", N);
  logits_ = f32("logits", N * V);
  losses_ = f32("losses", N);
  lse_ce_ = f32("losses", N);
  dres_ = f32("activation gradients", N * C);
  dln_ = f32("activation gradients", N * C);
  dqkv_ = f32("activation gradients", N * QKV);
  datt_ = f32("activation gradients", N * A);
  dgu_ = f32("activation gradients", N * 2 * H);
  dsw_ = f32("activation gradients", N * H);
  delta_ = f32("activation gradients", N * NH);
  norm_scratch_ = f32("scratch", cuda::rmsnorm_backward_scratch_floats((int)N, (int)C));
  norm_partials_ = static_cast<double*>(carve("scratch", cuda::grad_norm_scratch_doubles(total), 8));
  rope_ = f32("RoPE table", (int64_t)c.max_seq_len * c.head_size());
  inputs_ = i32("batch", N);
  targets_ = i32("batch", N);
  segments_ = i32("batch", N);
  positions_ = i32("batch", N);
  emb_order_ = i32("batch", N);
  emb_starts_ = i32("batch", N + 1);
  emb_tokens_ = i32("batch", N);
  entropy_rows_ = i32("batch", N);
  entropy_ = f32("losses", N);
}

Status CudaModel::init(const ModelConfig& c, int B, int T, Precision precision, int device) {
  if (!cuda::built()) return Status::error("[cuda] this build has no CUDA backend (configure with nvcc on the PATH)");
  if (cuda::device_count() <= device)
    return Status::error(fmt::format("[cuda] no CUDA device {} ({} found)", device, cuda::device_count()));
  if (auto s = model_config_validate(c); !s) return s;
  if (B < 1 || T < 1 || T > c.max_seq_len)
    return Status::error(fmt::format("[cuda] batch {}x{}: B must be >= 1 and T in [1, max_seq_len = {}]", B, T,
                                     c.max_seq_len));
  if (c.head_size() > 128 || c.head_size() % 2)
    return Status::error(fmt::format("[cuda] head size {}: the CUDA attention takes even sizes up to 128",
                                     c.head_size()));
  if (precision != Precision::kFp32 && precision != Precision::kBf16)
    return Status::error("[cuda] precision: fp32 or bf16");
  if (c.qkv_bias || c.qk_norm)
    return Status::error(fmt::format("[cuda] [model] {}: the CUDA backend has no kernels for it yet; train this "
                                     "model on the CPU (--device cpu)", c.qkv_bias ? "qkv_bias" : "qk_norm"));
  if (auto e = cuda::set_device(device); !e.empty()) return Status::error("[cuda] " + e);
  cfg_ = c;
  layout_ = param_layout(c);
  precision_ = precision;
  attn16_ = precision == Precision::kBf16 && cuda::attention_bf16_supported(c.head_size());
  Bmax_ = B, Tmax_ = T;
  slices_.clear();
  base_ = nullptr;
  plan_buffers();
  bytes_ = at_;
  stream_ = cuda::stream_create();
  if (!stream_) return Status::error("[cuda] could not create a stream");
  blas_ = cuda::blas_create(stream_);
  if (!blas_) return Status::error("[cuda] " + cuda::blas_error());
  base_ = static_cast<char*>(cuda::device_alloc(bytes_));
  if (!base_)
    return Status::error(fmt::format("[cuda] could not allocate {:.1f} MiB on {}:\n{}", bytes_ / 1048576.0,
                                     cuda::device_name(device), memory_report()));
  plan_buffers();
  cuda::memset_device(base_, 0, bytes_, stream_);
  std::vector<float> table((size_t)c.max_seq_len * c.head_size());
  const std::vector<double> inv_freq = rope_inv_freq(c);
  rope_table(table.data(), c.max_seq_len, c.head_size(), inv_freq.data());
  cuda::copy_to_device(rope_, table.data(), (int64_t)table.size() * 4, stream_);
  const int N = B * T;
  h_order_.assign(N, 0), h_starts_.assign(N + 1, 0), h_tokens_.assign(N, 0), h_count_.assign(c.vocab_size, 0);
  h_losses_.assign(N, 0.0f);
  h_norm_.assign(cuda::grad_norm_scratch_doubles(layout_.total), 0.0);
  if (auto e = sync(); !e.empty()) return Status::error("[cuda] " + e);
  return Status::ok();
}

std::string CudaModel::memory_report() const {
  std::vector<std::pair<std::string, int64_t>> merged;
  for (const auto& [name, size] : slices_) {
    if (!merged.empty() && merged.back().first == name) merged.back().second += size;
    else merged.emplace_back(name, size);
  }
  std::string out;
  for (const auto& [name, size] : merged) out += fmt::format("  {:<24} {:>10.1f} MiB\n", name, size / 1048576.0);
  out += fmt::format("  {:<24} {:>10.1f} MiB", "total", bytes_ / 1048576.0);
  return out;
}

std::string CudaModel::sync() {
  std::string e = cuda::stream_sync(stream_);
  if (e.empty()) collect_marks();
  return e;
}

void CudaModel::set_profiling(bool on) {
  if (on && !marks_) marks_ = cuda::marks_create(kMaxMarks), mark_ops_.assign(kMaxMarks, -1);
  if (!on && marks_) cuda::marks_destroy(marks_), marks_ = nullptr;
  prof_ms_.assign(kPCount, 0.0);
  nmarks_ = 0;
}

void CudaModel::mark(int op) {
  if (!marks_ || nmarks_ >= kMaxMarks) return;
  cuda::marks_record(marks_, nmarks_, stream_);
  mark_ops_[nmarks_++] = op;
}

void CudaModel::collect_marks() {
  if (!marks_) return;
  for (int i = 1; i < nmarks_; i++)
    if (mark_ops_[i] >= 0) prof_ms_[mark_ops_[i]] += cuda::marks_ms(marks_, i - 1, i);
  nmarks_ = 0;
}

std::vector<std::pair<std::string, double>> CudaModel::profile_ms() const {
  std::vector<std::pair<std::string, double>> out;
  for (int i = 0; i < (int)prof_ms_.size(); i++) out.emplace_back(kProfNames[i], prof_ms_[i]);
  return out;
}

void CudaModel::upload_params(const float* host) { cuda::copy_to_device(params_, host, layout_.total * 4, stream_); }
void CudaModel::download_params(float* host) {
  cuda::copy_to_host(host, params_, layout_.total * 4, stream_);
  (void)sync();
}
void CudaModel::download_grads(float* host) {
  cuda::copy_to_host(host, grads_, layout_.total * 4, stream_);
  (void)sync();
}
void CudaModel::download_moments(float* m, float* v) {
  cuda::copy_to_host(m, m_, layout_.total * 4, stream_);
  cuda::copy_to_host(v, v_, layout_.total * 4, stream_);
  (void)sync();
}
void CudaModel::upload_moments(const float* m, const float* v) {
  cuda::copy_to_device(m_, m, layout_.total * 4, stream_);
  cuda::copy_to_device(v_, v, layout_.total * 4, stream_);
}

void CudaModel::zero_grad() { cuda::memset_device(grads_, 0, layout_.total * 4, stream_); }

void CudaModel::linear_forward(float* out, const float* inp, int64_t w, int N, int IC, int OC, float beta) {
  if (precision_ == Precision::kBf16) cuda::matmul_forward_bf16(blas_, out, x16_, inp, w16_ + w, N, IC, OC, beta);
  else cuda::matmul_forward(blas_, out, inp, params_ + w, N, IC, OC, beta);
}

void CudaModel::linear_backward(float* dinp, int64_t w, const float* dout, const float* inp, int N, int IC, int OC) {
  if (precision_ == Precision::kBf16)
    cuda::matmul_backward_bf16(blas_, dinp, grads_ + w, d16_, x16_, dout, inp, w16_ + w, N, IC, OC);
  else cuda::matmul_backward(blas_, dinp, grads_ + w, dout, inp, params_ + w, N, IC, OC);
}

void CudaModel::layer_forward(int l, int B, int T) {
  const ModelConfig& c = cfg_;
  const int N = B * T, C = c.d_model, H = c.ffn_hidden, HS = c.head_size(), NH = c.n_heads, NKV = c.n_kv_heads;
  const int QKV = c.qkv_size(), A = NH * HS;
  const LayerOffsets& o = layout_.layers[l];
  const LayerBufs& a = layers_[l];
  const int32_t* pos = has_pos_ ? positions_ : nullptr;
  const int32_t* seg = has_seg_ ? segments_ : nullptr;
  const float eps = (float)c.norm_eps;
  float* x = resid_[l];
  cuda::rmsnorm_forward(a.ln1, a.rstd1, x, params_ + o.ln1, N, C, eps, stream_);
  mark(kPNormF);
  linear_forward(a.qkv, a.ln1, o.wqkv, N, C, QKV, 0.0f);
  mark(kPQkvF);
  cuda::rope_forward(a.qkv, pos, rope_, N, T, QKV, 0, NH, HS, stream_);
  cuda::rope_forward(a.qkv, pos, rope_, N, T, QKV, A, NKV, HS, stream_);
  mark(kPRopeF);
  if (attn16_) cuda::attention_forward_bf16(a.att, a.lse, qkv16_, a.qkv, seg, B, T, NH, NKV, HS, stream_);
  else cuda::attention_forward(a.att, a.lse, a.qkv, seg, B, T, NH, NKV, HS, stream_);
  mark(kPAttnF);
  cuda::copy_device(a.xmid, x, (int64_t)N * C * 4, stream_);
  mark(kPCopyF);
  linear_forward(a.xmid, a.att, o.wo, N, A, C, 1.0f);
  mark(kPOF);
  cuda::rmsnorm_forward(a.ln2, a.rstd2, a.xmid, params_ + o.ln2, N, C, eps, stream_);
  mark(kPNormF);
  linear_forward(a.gu, a.ln2, o.wgu, N, C, 2 * H, 0.0f);
  mark(kPGateUpF);
  cuda::swiglu_forward(a.sw, a.gu, N, H, stream_);
  mark(kPSwigluF);
  float* y = resid_[l + 1];
  cuda::copy_device(y, a.xmid, (int64_t)N * C * 4, stream_);
  mark(kPCopyF);
  linear_forward(y, a.sw, o.wdown, N, H, C, 1.0f);
  mark(kPDownF);
}

Status CudaModel::forward(const Batch& b, float& loss) {
  const ModelConfig& c = cfg_;
  if (!base_) return Status::error("[cuda] forward before init");
  if (Status s = model_batch_check("[cuda]", b, c, Bmax_, Tmax_); !s) return s;
  const int N = b.B * b.T, C = c.d_model, V = c.vocab_size;
  B_ = b.B, T_ = b.T;
  h_targets_.assign(b.targets.begin(), b.targets.begin() + N);
  has_seg_ = !b.segments.empty() && b.mask_segments;
  has_pos_ = !b.positions.empty();
  cuda::copy_to_device(inputs_, b.inputs.data(), (int64_t)N * 4, stream_);
  cuda::copy_to_device(targets_, b.targets.data(), (int64_t)N * 4, stream_);
  if (has_seg_) cuda::copy_to_device(segments_, b.segments.data(), (int64_t)N * 4, stream_);
  if (has_pos_) cuda::copy_to_device(positions_, b.positions.data(), (int64_t)N * 4, stream_);
  U_ = cuda::embedding_order(h_order_.data(), h_starts_.data(), h_tokens_.data(), h_count_.data(), b.inputs.data(),
                             N, V);
  cuda::copy_to_device(emb_order_, h_order_.data(), (int64_t)N * 4, stream_);
  cuda::copy_to_device(emb_starts_, h_starts_.data(), (int64_t)(U_ + 1) * 4, stream_);
  cuda::copy_to_device(emb_tokens_, h_tokens_.data(), (int64_t)U_ * 4, stream_);
  mark(-1);
  if (precision_ == Precision::kBf16) cuda::bf16_from_f32(w16_, params_, layout_.total, stream_);
  mark(kPBf16W);
  cuda::embedding_forward(resid_[0], inputs_, params_ + layout_.wte, N, C, V, stream_);
  mark(kPEmbedF);
  for (int l = 0; l < c.n_layers; l++) layer_forward(l, b.B, b.T);
  cuda::rmsnorm_forward(lnf_, rstdf_, resid_[c.n_layers], params_ + layout_.lnf, N, C, (float)c.norm_eps, stream_);
  mark(kPNormF);
  linear_forward(logits_, lnf_, layout_.lm_head, N, C, V, 0.0f);
  mark(kPHeadF);
  cuda::cross_entropy_forward(losses_, lse_ce_, logits_, targets_, N, V, stream_);
  mark(kPCeF);
  cuda::copy_to_host(h_losses_.data(), losses_, (int64_t)N * 4, stream_);
  if (auto e = sync(); !e.empty()) return Status::error("[cuda] forward: " + e);
  valid_ = 0;
  double sum = 0.0;  // in row order, as the CPU model
  for (int n = 0; n < N; n++)
    if (b.targets[n] >= 0) sum += h_losses_[n], valid_++;
  loss = valid_ ? (float)(sum / valid_) : 0.0f;
  return Status::ok();
}

std::vector<float> CudaModel::token_losses() { return {h_losses_.begin(), h_losses_.begin() + (size_t)B_ * T_}; }

void CudaModel::layer_backward(int l, int B, int T) {
  const ModelConfig& c = cfg_;
  const int N = B * T, C = c.d_model, H = c.ffn_hidden, HS = c.head_size(), NH = c.n_heads, NKV = c.n_kv_heads;
  const int QKV = c.qkv_size(), A = NH * HS;
  const LayerOffsets& o = layout_.layers[l];
  const LayerBufs& a = layers_[l];
  const int32_t* pos = has_pos_ ? positions_ : nullptr;
  const int32_t* seg = has_seg_ ? segments_ : nullptr;
  // MLP block: dres holds dy and becomes dxmid.
  linear_backward(dsw_, o.wdown, dres_, a.sw, N, H, C);
  mark(kPDownB);
  cuda::swiglu_backward(dgu_, dsw_, a.gu, N, H, stream_);
  mark(kPSwigluB);
  linear_backward(dln_, o.wgu, dgu_, a.ln2, N, C, 2 * H);
  mark(kPGateUpB);
  cuda::rmsnorm_backward(dres_, grads_ + o.ln2, norm_scratch_, dln_, a.xmid, params_ + o.ln2, a.rstd2, N, C, stream_);
  mark(kPNormB);
  // Attention block: dres becomes dx.
  linear_backward(datt_, o.wo, dres_, a.att, N, A, C);
  mark(kPOB);
  if (attn16_)
    cuda::attention_backward_bf16(dqkv_, delta_, qkv16_, dout16_, datt_, a.qkv, a.att, a.lse, seg, B, T, NH, NKV, HS,
                                  stream_);
  else cuda::attention_backward(dqkv_, delta_, datt_, a.qkv, a.att, a.lse, seg, B, T, NH, NKV, HS, stream_);
  mark(kPAttnB);
  cuda::rope_backward(dqkv_, pos, rope_, N, T, QKV, 0, NH, HS, stream_);
  cuda::rope_backward(dqkv_, pos, rope_, N, T, QKV, A, NKV, HS, stream_);
  mark(kPRopeB);
  linear_backward(dln_, o.wqkv, dqkv_, a.ln1, N, C, QKV);
  mark(kPQkvB);
  cuda::rmsnorm_backward(dres_, grads_ + o.ln1, norm_scratch_, dln_, resid_[l], params_ + o.ln1, a.rstd1, N, C,
                         stream_);
  mark(kPNormB);
}

void CudaModel::backward(float dloss) {
  const ModelConfig& c = cfg_;
  const int N = B_ * T_, C = c.d_model, V = c.vocab_size;
  if (dloss == 0.0f) dloss = valid_ ? 1.0f / (float)valid_ : 0.0f;
  mark(-1);
  cuda::cross_entropy_backward(logits_, lse_ce_, targets_, dloss, N, V, stream_);
  mark(kPCeB);
  linear_backward(dln_, layout_.lm_head, logits_, lnf_, N, C, V);
  mark(kPHeadB);
  cuda::memset_device(dres_, 0, (int64_t)N * C * 4, stream_);
  cuda::rmsnorm_backward(dres_, grads_ + layout_.lnf, norm_scratch_, dln_, resid_[c.n_layers], params_ + layout_.lnf,
                         rstdf_, N, C, stream_);
  mark(kPNormB);
  for (int l = c.n_layers - 1; l >= 0; l--) layer_backward(l, B_, T_);
  cuda::embedding_backward(grads_ + layout_.wte, dres_, emb_order_, emb_starts_, emb_tokens_, U_, C, stream_);
  mark(kPEmbedB);
}

double CudaModel::grad_norm() {
  mark(-1);
  return std::sqrt(cuda::grad_norm_squared(grads_, layout_.total, norm_partials_, h_norm_.data(), stream_));
}

void CudaModel::adamw(const CudaAdamW& o, double norm, int64_t t) {
  const float scale = grad_clip_scale(norm, o.grad_clip);
  for (const ParamTensor& p : layout_.tensors)
    cuda::adamw_step(params_ + p.offset, m_ + p.offset, v_ + p.offset, grads_ + p.offset, p.size(), o.lr, o.beta1,
                     o.beta2, o.eps, p.decay || o.decay_all ? o.weight_decay : 0.0f, scale, t, stream_);
  mark(kPOptim);
}

double CudaModel::optimizer_step(const CudaAdamW& o, int64_t t) {
  const double norm = grad_norm();
  adamw(o, norm, t);
  return norm;
}

double CudaModel::prediction_entropy(int max_rows) {
  const int N = B_ * T_, V = cfg_.vocab_size;
  std::vector<int32_t> rows, take;
  for (int n = 0; n < N; n++)
    if (h_targets_[n] >= 0) rows.push_back(n);
  const int K = std::min<int>(max_rows, (int)rows.size());
  if (K == 0) return 0.0;
  for (int i = 0; i < K; i++) take.push_back(rows[(size_t)i * rows.size() / K]);
  cuda::copy_to_device(entropy_rows_, take.data(), (int64_t)K * 4, stream_);
  cuda::softmax_entropy_rows(entropy_, logits_, lse_ce_, entropy_rows_, K, V, stream_);
  std::vector<float> h(K);
  cuda::copy_to_host(h.data(), entropy_, (int64_t)K * 4, stream_);
  (void)sync();
  double total = 0.0;
  for (float x : h) total += x;
  return total / K;
}

}  // namespace smelt
