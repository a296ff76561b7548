// pipert_cuda.h: the device side of libpipert (libpipert_cuda.a, built only where CMake finds
// nvcc): what the CUDA programs that `pipec compile --target cuda` emit call (docs/cuda.md);
// tests/cuda/ checks every kernel here against its CPU twin.
//
// Conventions are pipert.h's, with device pointers: kernels take outputs first, then inputs, then
// sizes and scalars; tensors are dense, row-major, float32 unless noted, ids int32; `acc` = 1
// adds the contribution, rounded first, into the output (never beta = 1 of a GEMM). The names are
// the CPU kernels' with `pr_cu_` for `pr_`, and the same arguments; host arrays (dims, strides,
// sizes, pointer lists) stay host arrays. Every kernel is launched on pr_cu_stream() and returns
// without waiting (errors of a launch are checked at once, errors of its execution at the next
// synchronising call).
//
// Determinism: no atomics anywhere; every reduction has a split fixed by the shapes alone (a block
// of PR_CU_THREADS threads, each owning fixed elements, combined in a fixed shuffle tree; sums
// over rows in ascending row order), so a kernel's bits depend only on its inputs and the GPU's
// architecture. The numbers are close to, not bitwise equal with, the CPU kernels': the GEMMs
// are cuBLAS's (pedantic math: fp32 throughout, no TF32), row reductions combine in another tree.
// The library is built with --fmad=false (no contraction, as the CPU's -ffp-contract=off) and the
// CPU's exp/tanh/sigmoid/gelu polynomials, so elementwise kernels match the CPU's bitwise.
//
// Bad ids (embedding, cross-entropy targets) cannot stop a kernel: the kernel skips them and
// raises a device flag that pr_cu_check_status (called by the program at the end of every step,
// before the update) turns into the usual `FILE:LINE: rank R: error:` line and HINT.
//
// Scratch: kernels that need device scratch (acc of a GEMM, the sums of losses and norms, the
// embedding's buckets) take it from one pool that pr_cu_init allocates (scratch_bytes, its size
// from the pr_cu_*_scratch functions below, the maximum over the program's calls); too small a
// pool is a clear error, never an allocation inside a step.
#ifndef PIPERT_CUDA_H
#define PIPERT_CUDA_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PR_CU_THREADS 256 // threads of every reducing block (fixes the reductions' split)

// ---------------------------------------------------------------------------------------------
// Device, stream, handles, regions (cuda_device.cu)

// Selects device `device` (a rank's local rank) of this machine, after checking that there is a
// GPU at all and at least `needed` of them (clear errors, no CUDA call fails later for it);
// creates the stream, the cuBLAS handle (pedantic fp32 math) and the scratch pool. Once.
void pr_cu_init(int device, int needed, size_t scratch_bytes);
// Frees the pool, the handle and the stream (end of the program).
void pr_cu_finish(void);
void *pr_cu_stream(void);        // the cudaStream_t every kernel runs on
void *pr_cu_cublas(void);        // the cublasHandle_t
int pr_cu_device(void);          // the selected device, -1 before pr_cu_init
void pr_cu_synchronize(void);    // waits for the stream; checks every kernel's execution
size_t pr_cu_scratch_size(void); // bytes of the pool

// Stops the program unless plan_bytes (the memory plan's device bytes, regions and pool) fit in
// the device's free memory; call after pr_cu_init, before the first region.
void pr_cu_check_plan_memory(uint64_t plan_bytes);
// One cudaMalloc per region, zeroed (a zero-byte region still gets a pointer); clear error when
// the device has no room.
void *pr_cu_alloc_region(const char *what, size_t bytes);
void pr_cu_free_region(void *p);
// Host <-> device copies on the stream (the host side pageable: the call waits).
void pr_cu_upload(void *dst_dev, const void *src_host, size_t bytes);
void pr_cu_download(void *dst_host, const void *src_dev, size_t bytes);
// Synchronises and stops the program if a kernel raised a flag (an id outside [0, V)).
void pr_cu_check_status(void);

// The device table of pr_main (trainloop_cuda.cu; PrDevice in pipert.h): a generated CUDA
// program sets PrProgram.device = &pr_device_cuda.
typedef struct PrDevice PrDevice;
extern const PrDevice pr_device_cuda;

// ---------------------------------------------------------------------------------------------
// GEMMs (cuda_gemm.cu): cuBLAS, row-major through the transposed column-major call.

// matmul: y (batch,M,N) = op(a) (batch,M,K) . op(b) (batch|1,K,N). Scratch: none.
void pr_cu_matmul_fwd(float *y, const float *a, const float *b, int64_t batch, int64_t M, int64_t N,
                      int64_t K, int ta, int tb, int b_batched);
// da as a (batch,M,K) or (batch,K,M) with ta. Scratch (acc): batch*M*K floats.
void pr_cu_matmul_bwd_a(float *da, const float *dy, const float *b, int64_t batch, int64_t M,
                        int64_t N, int64_t K, int ta, int tb, int b_batched, int acc);
// db as b; with b_batched = 0, summed over the batch in ascending order (one GEMM over batch*M
// rows, or beta = 1 chained GEMMs in order). Scratch (acc): (b_batched ? batch : 1)*K*N floats.
void pr_cu_matmul_bwd_b(float *db, const float *dy, const float *a, int64_t batch, int64_t M,
                        int64_t N, int64_t K, int ta, int tb, int b_batched, int acc);
// linear: y (rows,out) = x (rows,in) . w^T (w (out,in)) + bias (out) (bias may be NULL).
void pr_cu_linear_fwd(float *y, const float *x, const float *w, const float *bias, int64_t rows,
                      int64_t in, int64_t out);
// dx (rows,in) = dy (rows,out) . w (out,in). Scratch (acc): rows*in floats.
void pr_cu_linear_bwd_x(float *dx, const float *dy, const float *w, int64_t rows, int64_t in,
                        int64_t out, int acc);
// dw (out,in) = dy^T . x. Scratch (acc): out*in floats.
void pr_cu_linear_bwd_w(float *dw, const float *dy, const float *x, int64_t rows, int64_t in,
                        int64_t out, int acc);
// db (cols) = sum over rows of dy (rows,cols), rows ascending (one thread per column).
void pr_cu_sum_rows(float *db, const float *dy, int64_t rows, int64_t cols, int acc);

// ---------------------------------------------------------------------------------------------
// Elementwise (cuda_elementwise.cu)

// y (ydims, rank <= 8) = a op b, astr/bstr a's and b's strides over y's dims (0: broadcast);
// op 0 add, 1 sub, 2 mul.
void pr_cu_binary_fwd(float *y, const float *a, const float *b, int op, int rank,
                      const int64_t *ydims, const int64_t *astr, const int64_t *bstr);
// dx (xdims) = reduce_to_x(dy * d op/dx); each element of dx sums its dy elements in ascending
// (row-major) order, one thread per element of dx.
void pr_cu_binary_bwd(float *dx, const float *dy, const float *other, int op, int which, int rank,
                      const int64_t *ydims, const int64_t *xdims, const int64_t *ostr, int acc);
void pr_cu_scale_fwd(float *y, const float *x, int64_t n, float factor);
void pr_cu_scale_bwd(float *dx, const float *dy, int64_t n, float factor, int acc);
void pr_cu_relu_fwd(float *y, const float *x, int64_t n);
void pr_cu_relu_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc);
// exact: erf, else tanh; cdf: the saved factor c of y = x * c (NULL: not saved / recomputed)
void pr_cu_gelu_fwd(float *y, float *cdf, const float *x, int64_t n, int exact);
void pr_cu_gelu_bwd(float *dx, const float *dy, const float *x, const float *cdf, int64_t n,
                    int exact, int acc);
void pr_cu_tanh_fwd(float *y, const float *x, int64_t n);
void pr_cu_tanh_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc);
void pr_cu_sigmoid_fwd(float *y, const float *x, int64_t n);
void pr_cu_sigmoid_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc);
// silu: y = x * sigmoid(x); the backward from x (sigmoid recomputed)
void pr_cu_silu_fwd(float *y, const float *x, int64_t n);
void pr_cu_silu_bwd(float *dx, const float *dy, const float *x, int64_t n, int acc);
// silu_mul: y = silu(g) * u; the backward writes dg and du in one pass (pr_silu_mul_bwd's bits)
void pr_cu_silu_mul_fwd(float *y, const float *g, const float *u, int64_t n);
void pr_cu_silu_mul_bwd(float *dg, float *du, const float *dy, const float *g, const float *u,
                        int64_t n, int acc);
// exp, rsqrt, pow by a constant (neg: pr_cu_scale_fwd/bwd with factor -1); pow's integer
// exponents by the CPU's products (bitwise), any other by the device's powf (within 2 ulp)
void pr_cu_exp_fwd(float *y, const float *x, int64_t n);
void pr_cu_exp_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc);
void pr_cu_rsqrt_fwd(float *y, const float *x, int64_t n);
void pr_cu_rsqrt_bwd(float *dx, const float *dy, const float *y, int64_t n, int acc);
void pr_cu_pow_fwd(float *y, const float *x, int64_t n, float exponent);
void pr_cu_pow_bwd(float *dx, const float *dy, const float *x, int64_t n, float exponent, int acc);
// div's backward (forward: pr_cu_binary_fwd with op 3), a thread per element of dx summing in
// the CPU's order
void pr_cu_div_bwd(float *dx, const float *dy, const float *a, const float *b, int which, int rank,
                   const int64_t *ydims, const int64_t *xdims, const int64_t *astr,
                   const int64_t *bstr, int acc);
// mean over the middle dim of (outer, dim, inner): a thread per output, k ascending
void pr_cu_mean_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner);
void pr_cu_mean_bwd(float *dx, const float *dy, int64_t outer, int64_t dim, int64_t inner, int acc);
// slice's backward (its forward is pr_cu_slice with acc 0): dy into zeros
void pr_cu_pad(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
               int64_t offset, int64_t size, int acc);
// y (n) = xs[0] + ... + xs[k-1] left to right (xs a host array of device pointers, k <= 16;
// y may alias any input).
void pr_cu_add_n(float *y, const float *const *xs, int k, int64_t n);
void pr_cu_fill(float *y, int64_t n, float value);
void pr_cu_accumulate(float *y, const float *x, int64_t n, int acc);
// Fused (the plan's bias + GELU): y (rows,C) = gelu(x + bias (C)), pre (rows,C) = x + bias
// (saved for the backward, may be NULL).
void pr_cu_bias_gelu_fwd(float *y, float *pre, const float *x, const float *bias, int64_t rows,
                         int64_t C);

// ---------------------------------------------------------------------------------------------
// Normalisations (cuda_norm.cu)

// softmax over the middle dim of (outer,dim,inner): one block per row (inner == 1), else one
// thread per (outer, inner) column walking dim in order.
void pr_cu_softmax_fwd(float *y, const float *x, int64_t outer, int64_t dim, int64_t inner);
void pr_cu_softmax_bwd(float *dx, const float *dy, const float *y, int64_t outer, int64_t dim,
                       int64_t inner, int acc);
// layernorm over the last dim C of (rows,C); mean, rstd (rows) saved. One block per row.
void pr_cu_layernorm_fwd(float *y, float *mean, float *rstd, const float *x, const float *w,
                         const float *b, int64_t rows, int64_t C, float eps);
void pr_cu_layernorm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                           const float *mean, const float *rstd, int64_t rows, int64_t C, int acc);
// dw (C) = sum over rows (ascending) of dy * norm, one thread per column.
void pr_cu_layernorm_bwd_w(float *dw, const float *dy, const float *x, const float *mean,
                           const float *rstd, int64_t rows, int64_t C, int acc);
// rms_norm over the last dim C of (rows,C); rstd (rows) saved. One block per row; dw (C) = sum
// over rows (ascending) of dy * norm, one thread per column.
void pr_cu_rms_norm_fwd(float *y, float *rstd, const float *x, const float *w, int64_t rows,
                        int64_t C, float eps);
void pr_cu_rms_norm_bwd_x(float *dx, const float *dy, const float *x, const float *w,
                          const float *rstd, int64_t rows, int64_t C, int acc);
void pr_cu_rms_norm_bwd_w(float *dw, const float *dy, const float *x, const float *rstd,
                          int64_t rows, int64_t C, int acc);

// ---------------------------------------------------------------------------------------------
// Embedding (cuda_embedding.cu)

// y (n,C) = w (V,C)[idx (n)]; an id outside [0,V) gives a zero row and raises the status flag.
void pr_cu_embedding_fwd(float *y, const int32_t *idx, const float *w, int64_t n, int64_t V,
                         int64_t C);
// dw (V,C): row v = sum of dy rows i with idx[i] == v, i ascending, with no atomics: a stable
// counting sort of the ids (one thread: O(n + V)) buckets them, then one thread per (v, column)
// owns its element. Scratch: pr_cu_embedding_bwd_scratch(n, V) bytes.
void pr_cu_embedding_bwd_w(float *dw, const float *dy, const int32_t *idx, int64_t n, int64_t V,
                           int64_t C, int acc);
size_t pr_cu_embedding_bwd_scratch(int64_t n, int64_t V);

// ---------------------------------------------------------------------------------------------
// Layout (cuda_layout.cu): 4-byte elements.

void pr_cu_copy(void *y, const void *x, int64_t bytes);
void pr_cu_permute(void *y, const void *x, int rank, const int64_t *xdims, const int64_t *perm);
// ys / xs: host arrays of n <= 16 device pointers (NULL: skipped / read as zeros).
void pr_cu_split(float *const *ys, const float *x, int64_t outer, int64_t inner, int n,
                 const int64_t *sizes);
void pr_cu_concat(float *y, const float *const *xs, int64_t outer, int64_t inner, int n,
                  const int64_t *sizes);
void pr_cu_slice(float *dx, const float *dy, int64_t outer, int64_t inner, int64_t total,
                 int64_t offset, int64_t size, int acc);

// ---------------------------------------------------------------------------------------------
// Attention (cuda_attention.cu) on packed qkv (B,T,C+2Ckv) -> y (B,T,C), NH query heads, NKV kv
// heads (pr_attention_fwd's grouping), causal or not, att (B,NH,T,T) the probabilities (with
// causal, 0 above the diagonal). One block per (b,h,t) query row: scores,
// the row softmax and the weighted sum of v, every sum in ascending order. Not yet fast
// (no GEMM formulation, no fusion): correctness first.
void pr_cu_attention_fwd(float *y, float *att, const float *qkv, int64_t B, int64_t T, int64_t C,
                         int64_t NH, int64_t NKV, int causal);
// ws: pr_cu_attention_bwd_ws(B,T,C,NH,NKV,causal) bytes of device memory (dpre (B,NH,T,T)), planned
// like the CPU's workspace.
size_t pr_cu_attention_bwd_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal);
void pr_cu_attention_bwd(float *dqkv, const float *dy, const float *qkv, const float *att, void *ws,
                         int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal,
                         int acc);
// The same on separate q (B,T,C), k and v (B,T,Ckv) (the attention op); its backward in three
// calls, one gradient each (the same workspace, whose size the _ws functions give).
void pr_cu_attention_sep_fwd(float *y, float *att, const float *q, const float *k, const float *v,
                             int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV, int causal);
size_t pr_cu_attention_sep_bwd_q_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal);
size_t pr_cu_attention_sep_bwd_k_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal);
size_t pr_cu_attention_sep_bwd_v_ws(int64_t B, int64_t T, int64_t C, int64_t NH, int64_t NKV,
                                    int causal);
void pr_cu_attention_sep_bwd_q(float *dq, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc);
void pr_cu_attention_sep_bwd_k(float *dk, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc);
void pr_cu_attention_sep_bwd_v(float *dv, const float *dy, const float *q, const float *k,
                               const float *v, const float *att, void *ws, int64_t B, int64_t T,
                               int64_t C, int64_t NH, int64_t NKV, int causal, int acc);
// rope on x (outer,T,inner,D) (cuda_attention.cu): one thread per pair, the CPU's angles and
// formula (pr_rope_fwd); the backward rotates by the opposite angles.
void pr_cu_rope_fwd(float *y, const float *x, int64_t outer, int64_t T, int64_t inner, int64_t D,
                    float theta, int interleaved);
void pr_cu_rope_bwd(float *dx, const float *dy, int64_t outer, int64_t T, int64_t inner, int64_t D,
                    float theta, int interleaved, int acc);

// ---------------------------------------------------------------------------------------------
// Losses (cuda_loss.cu). loss / dloss are device scalars.

// loss = mean over rows of logsumexp - logit[tgt], row terms in double summed in ascending order.
// Scratch: rows doubles.
void pr_cu_cross_entropy_fwd(float *loss, const float *logits, const int32_t *tgt, int64_t rows,
                             int64_t V);
void pr_cu_cross_entropy_bwd(float *dlogits, const float *dloss, const float *logits,
                             const int32_t *tgt, int64_t rows, int64_t V, int acc);
// mse: loss = mean (p - t)^2 in double; blocks of PR_CU_THREADS*8 elements summed in a fixed tree,
// block sums added in ascending order. Scratch: pr_cu_reduce_scratch(n) bytes.
void pr_cu_mse_fwd(float *loss, const float *p, const float *t, int64_t n);
void pr_cu_mse_bwd(float *dx, const float *dloss, const float *p, const float *t, int64_t n,
                   int which, int acc);
// Rows whose argmax (ties: lowest index) equals tgt; waits for the result. Scratch: rows ints.
int64_t pr_cu_count_correct(const float *logits, const int32_t *tgt, int64_t rows, int64_t V);

// ---------------------------------------------------------------------------------------------
// Optimizers and norms (cuda_optim.cu): the CPU formulas element for element (bitwise with
// --fmad=false and fmaf where the CPU has fmaf).

void pr_cu_adamw_step(float *p, const float *g, float gscale, float *m, float *v, int64_t n,
                      double lr, double beta1, double beta2, double eps, double weight_decay,
                      int64_t t);
void pr_cu_sgd_step(float *p, const float *g, float gscale, float *buf, int64_t n, double lr,
                    double momentum, double weight_decay, int64_t t);
// *out (a device double) = sum of g^2 in double: blocks of PR_CU_THREADS*8 elements in a fixed
// tree, block sums in ascending order (a fixed split, not the CPU's sequential order). Scratch:
// pr_cu_reduce_scratch(n) bytes.
void pr_cu_sumsq(double *out, const float *g, int64_t n);
size_t pr_cu_reduce_scratch(int64_t n);

#ifdef __cplusplus
}
#endif

#endif // PIPERT_CUDA_H
