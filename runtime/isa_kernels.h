// isa_kernels.h: the kernels the portable libpipert.a carries in three builds, one per x86-64
// level: v1 (the baseline, SSE2), v3 (AVX2, FMA) and v4 (AVX-512), picked once per process by
// the CPU (isa.c). One line per exported function of the sources CMake lists as
// PIPERT_ISA_SOURCES (the kernels and the optimizers); CMake turns the list into the header that
// renames each of them f -> f__v1 / f__v3 / f__v4 in its build (isa_rename.h), and isa.c makes
// f an ifunc over the three. A function of those sources missing here is defined four times: the
// link of every program fails on it.
//
// The three builds compute the same bits: the sources keep every sum in one order written in the
// code (no reassociation, no FMA contraction: -ffp-contract=off), so a wider vector only runs
// more independent lanes of it (tests/e2e/march.sh runs each level and compares). The one
// exception: the GEMMs, pipec's own (gemm.c, fused multiply-adds) at v3 and v4 and OpenBLAS at v1,
// so v1 rounds matrix products differently (v3 and v4 compute the same bits).
PR_ISA_KERNEL(pr_linear_fwd)
PR_ISA_KERNEL(pr_linear_bwd_x)
PR_ISA_KERNEL(pr_linear_bwd_w)
PR_ISA_KERNEL(pr_matmul_fwd)
PR_ISA_KERNEL(pr_matmul_bwd_a)
PR_ISA_KERNEL(pr_matmul_bwd_b)
PR_ISA_KERNEL(pr_sum_rows)
PR_ISA_KERNEL(pr_gemm)
PR_ISA_KERNEL(pr_gemm_panels)
PR_ISA_KERNEL(pr_gemm_pack)
PR_ISA_KERNEL(pr_gemm_packed)
PR_ISA_KERNEL(pr_gemm_in_use)
PR_ISA_KERNEL(pr_accumulate)
PR_ISA_KERNEL(pr_add_n)
PR_ISA_KERNEL(pr_binary_fwd)
PR_ISA_KERNEL(pr_binary_bwd)
PR_ISA_KERNEL(pr_fill)
PR_ISA_KERNEL(pr_gelu_fwd)
PR_ISA_KERNEL(pr_gelu_bwd)
PR_ISA_KERNEL(pr_relu_fwd)
PR_ISA_KERNEL(pr_relu_bwd)
PR_ISA_KERNEL(pr_scale_fwd)
PR_ISA_KERNEL(pr_scale_bwd)
PR_ISA_KERNEL(pr_sigmoid_fwd)
PR_ISA_KERNEL(pr_sigmoid_bwd)
PR_ISA_KERNEL(pr_tanh_fwd)
PR_ISA_KERNEL(pr_tanh_bwd)
PR_ISA_KERNEL(pr_layernorm_fwd)
PR_ISA_KERNEL(pr_layernorm_bwd_x)
PR_ISA_KERNEL(pr_layernorm_bwd_w)
PR_ISA_KERNEL(pr_softmax_fwd)
PR_ISA_KERNEL(pr_softmax_bwd)
PR_ISA_KERNEL(pr_embedding_fwd)
PR_ISA_KERNEL(pr_embedding_bwd_w)
PR_ISA_KERNEL(pr_concat)
PR_ISA_KERNEL(pr_copy)
PR_ISA_KERNEL(pr_permute)
PR_ISA_KERNEL(pr_slice)
PR_ISA_KERNEL(pr_split)
PR_ISA_KERNEL(pr_attention_fwd)
PR_ISA_KERNEL(pr_attention_bwd)
PR_ISA_KERNEL(pr_attention_bwd_ws)
PR_ISA_KERNEL(pr_count_correct)
PR_ISA_KERNEL(pr_cross_entropy_fwd)
PR_ISA_KERNEL(pr_cross_entropy_bwd)
PR_ISA_KERNEL(pr_mse_fwd)
PR_ISA_KERNEL(pr_mse_bwd)
PR_ISA_KERNEL(pr_adamw_step)
PR_ISA_KERNEL(pr_adamw_params)
PR_ISA_KERNEL(pr_lr_at)
PR_ISA_KERNEL(pr_sgd_step)
PR_ISA_KERNEL(pr_sumsq)
PR_ISA_KERNEL(pr_bf16_widen)
PR_ISA_KERNEL(pr_bf16_narrow)
PR_ISA_KERNEL(pr_f16_widen)
PR_ISA_KERNEL(pr_f16_narrow)
