// Choosing the GEMM back end by measurement: the linear layers' GEMMs of one training step of a
// model (forward and both backward products, at the model's own shapes) are timed on each fp32
// back end (OpenBLAS, oneDNN, BLIS where installed) and in the run's precision; the fastest fp32
// back end is chosen, and the rates are cached per machine so later runs choose the same without
// measuring again. Not the kernels (kernels/cpu/gemm.cpp), not the trainer.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "smelt/common/status.hpp"
#include "smelt/kernels/kernels.hpp"
#include "smelt/model/config.hpp"

namespace smelt {

struct GemmChoice {
  GemmBackend backend = GemmBackend::kOpenBlas;  // fp32 GEMMs (and the portable bf16 path's sgemm)
  std::string how;           // "measured", "cached" or "configured"
  double openblas_gflops = 0, onednn_gflops = 0;  // fp32, 1 thread, at the model's shapes
  double blis_gflops = 0;                          // the same, where BLIS is installed (else 0)
  Precision precision = Precision::kFp32;
  std::string engine;        // what the run's GEMMs run on: "openblas", "onednn", "onednn amx_bf16", ...
  double gflops = 0;         // the model's GEMM set at the run's thread count, back end and precision:
                             // the best of this run's measurement and the best cached before
  int threads = 1;
  // bf16 under "auto" where the CPU has bf16 units and Smelt's packed kernel runs: each linear
  // layer's three products go to the faster of oneDNN and the packed kernel at 1 thread (so every
  // thread count gets the same engines, and the same bits). 0 products: not chosen (oneDNN).
  int bf16_products = 0, bf16_packed = 0;  // products chosen, of which on the packed kernel
  double bf16_onednn_gflops = 0, bf16_packed_gflops = 0, bf16_chosen_gflops = 0;  // 1 thread, the set
  std::string report() const;  // one line
};

// One linear layer's GEMMs: (rows, in) x (in, out) forward, both gradients backward.
struct GemmShape {
  int64_t rows = 0, in = 0, out = 0;
};
// Seconds of one forward + backward of each shape, on the current back end and `precision`, with
// `threads` threads; the shapes interleaved for at least `seconds` after a warm-up.
std::vector<double> gemm_measure_shapes(const std::vector<GemmShape>& shapes, Precision precision, int threads,
                                        double seconds = 0.3);
// The bytes gemm_measure_shapes allocates and touches for these shapes (the largest weight, input
// and output, with their gradients; bf16 operand copies), and what gemm_select's measurement at
// (B, T) holds at its peak: part of a training process's peak memory (run_memory.hpp).
int64_t gemm_measure_bytes(const std::vector<GemmShape>& shapes, Precision precision);
int64_t gemm_select_bytes(const ModelConfig& c, int B, int T, Precision precision);

// The GEMM rate (GFLOP/s) of the linear layers of one step at batch (B,T) rows capped at 512
// (enough for every kernel's steady state), on the current back end and `precision`, with
// `threads` threads; at least `seconds` of timing after a warm-up.
double gemm_measure_model(const ModelConfig& c, int B, int T, Precision precision, int threads,
                          double seconds = 0.3);

// Mean seconds of each of n calls: one warm-up call each (packing buffers, oneDNN primitives),
// then passes calling each once, so the calls share the machine's state (caches, clock) alike,
// for at least `seconds` and at least 2 passes.
std::vector<double> interleaved_seconds(size_t n, const std::function<void(size_t)>& call, double seconds);

// Seconds of each linear layer product at rows `shapes[i].rows` on bf16 engine e with `threads`
// threads (the choice uses 1): out[3 i + p] for LinearProduct p; interleaved passes for at least
// `seconds` after a warm-up.
std::vector<double> gemm_bf16_product_seconds(const std::vector<GemmShape>& shapes, Bf16Engine e,
                                              double seconds = 0.3, int threads = 1);

// want: "auto" (measure, or read this machine's cache), "openblas", "onednn" or "blis" (where
// installed; auto measures it beside the other two, and skips it where it is not). Sets the chosen
// back end (gemm_set_backend) and fills out. The fp32 choice uses 1-thread rates, so every thread
// count of the same model picks the same back end (and gets the same bits). Cache:
// $SMELT_CACHE_DIR or $XDG_CACHE_HOME/smelt or ~/.cache/smelt, file gemm-rates.json, keyed by CPU
// model, flags, shapes, precision and threads; written under a lock so concurrent runs agree. The
// 1-thread fp32 rates that choose the back end are measured once; the run's own rate (the MFU
// denominator) is measured every time and the cache keeps the best seen. In bf16 under "auto",
// the engine of each linear layer product is chosen the same way (1-thread rates, measured once,
// cached) and set with gemm_bf16_set_engine; otherwise every product runs on oneDNN.
Status gemm_select(const std::string& want, const ModelConfig& c, int B, int T, Precision precision,
                   int threads, GemmChoice& out);

// The run's GEMM rate measured again (the end of a run whose steps went faster than the start's
// measurement, which a busy or still-cold machine reads low): on g's back end, precision and
// threads, kept in the cache as the best seen when higher. Returns this measurement; g.gflops
// becomes the best of it and what g held.
double gemm_measure_again(const ModelConfig& c, int B, int T, GemmChoice& g);

}  // namespace smelt
