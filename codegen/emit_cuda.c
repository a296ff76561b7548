// emit_cuda.c: what the CUDA target (pipec compile --target cuda; docs/cuda.md) adds to the
// shared printer (emit_c.c, segment.c, emit_rank.c): the `pr_cu_` kernel names, the device-side
// helpers of the generated rank<r>.cu (a scalar read back from the device, the host staging of
// the data inputs, the sizes of the kernels' scratch pool and of the attention workspace) and
// the nvcc build. The program is the CPU target's, call for call, over device pointers: the
// regions come from pr_cu_alloc_region (trainloop.c through pr_device_cuda), the data is loaded on
// the host into static staging buffers and uploaded into its slot, the loss is downloaded at LOSS.
//
// Scratch: the pool is sized from the program's calls: the largest output of a GEMM backward
// (the acc path computes into scratch first), the sum-of-squares and mse partial sums of the
// largest tensor, the cross-entropy rows, the embedding backward's buckets, count_correct's rows.
// The attention backward's workspace (pr_cu_attention_bwd_ws, larger than the CPU's planned one)
// is one device buffer cu_ws that every such call shares (one stream: the calls never overlap);
// the plan's CPU workspace in the activations stays unused on the GPU.
#include <string.h>

#include "../compiler/training.h"
#include "../ir/ops.h"
#include "emit.h"

const char *kernel_name(E *e, const char *kernel) {
  if (!e->cuda || strncmp(kernel, "pr_", 3) != 0) return kernel;
  return arena_printf(e->a, "pr_cu_%s", kernel + 3);
}

static int64_t numel(const E *e, const Tensor *t) {
  return shape_numel(&t->shape, e->tc->mb_size);
}

static int64_t karg(const KArgs *ka, const char *name) {
  for (int i = 0; i < ka->n; i++)
    if (!strcmp(ka->a[i].name, name) && ka->a[i].kind == 'i') return ka->a[i].i;
  return 0;
}

// Every node of the rank's stages (forward, backward, weight gradients, step end), through fn.
static void each_node(E *e, void (*fn)(E *, const Node *, void *), void *arg) {
  for (int i = 0; i < e->rp->nvs; i++) {
    const VStage *s = &e->prog->vs[e->rp->vs[i]];
    const Segment *segs[4] = {&s->f, &s->b, &s->w, &s->step};
    for (int k = 0; k < 4; k++)
      for (int j = 0; j < segs[k]->n; j++) fn(e, segs[k]->nodes[j], arg);
  }
}

static void scratch_of(E *e, const Node *n, void *arg) {
  (void)arg;
  const char *k = n->op->kernel;
  if (!k) return;
  KArgs ka = {.n = 0};
  n->op->kargs(n, e->tc->mb_size, e->a, &ka);
  if (!strcmp(k, "pr_matmul_bwd_a") || !strcmp(k, "pr_matmul_bwd_b") ||
      !strcmp(k, "pr_linear_bwd_x") || !strcmp(k, "pr_linear_bwd_w"))
    out(e, "  b = at_least(b, %lld); // %s\n", (long long)(numel(e, n->out[0]) * 4),
        comment(e, n->name));
  else if (!strcmp(k, "pr_cross_entropy_fwd"))
    out(e, "  b = at_least(b, %lld); // %s\n", (long long)(karg(&ka, "rows") * 8 + 8),
        comment(e, n->name));
  else if (!strcmp(k, "pr_mse_fwd"))
    out(e, "  b = at_least(b, pr_cu_reduce_scratch(%lld) + 8); // %s\n", (long long)karg(&ka, "n"),
        comment(e, n->name));
  else if (!strcmp(k, "pr_embedding_bwd_w"))
    out(e, "  b = at_least(b, pr_cu_embedding_bwd_scratch(%lld, %lld)); // %s\n",
        (long long)karg(&ka, "n"), (long long)karg(&ka, "V"), comment(e, n->name));
}

static void ws_of(E *e, const Node *n, void *arg) {
  (void)arg;
  if (!n->op->workspace || !n->op->kernel) return;
  KArgs ka = {.n = 0};
  n->op->kargs(n, e->tc->mb_size, e->a, &ka);
  out(e, "  b = at_least(b, %s_ws(", kernel_name(e, n->op->kernel));
  for (int i = 0; i < ka.n; i++) out(e, "%s%lld", i ? ", " : "", (long long)ka.a[i].i);
  out(e, ")); // %s\n", comment(e, n->name));
}

void emit_cuda_support(E *e) {
  const TrainConfig *tc = e->tc;
  int64_t largest = 1;
  for (int i = 0; i < e->g->ntensors; i++)
    if (e->p->offset[i] >= 0 && numel(e, e->g->tensors[i]) > largest)
      largest = numel(e, e->g->tensors[i]);
  out(e, "// ---- Device helpers (CUDA target)\n"
         "static size_t at_least(size_t a, size_t b) {\n  return a > b ? a : b;\n}\n\n");
  out(e,
      "// A host array of N device pointers for one call of a list kernel (add_n, split, concat):\n"
      "// C's compound literal (T[]){...} as a C++ temporary, alive to the end of the call.\n"
      "template <typename T, int N> struct PtrList {\n  T p[N];\n"
      "  operator T const *() const {\n    return p;\n  }\n};\n\n");
  out(e, "// A device scalar (a loss) read back to the host.\n"
         "static float __attribute__((unused)) dev_scalar(const float *p) {\n  float h = 0;\n"
         "  pr_cu_download(&h, p, sizeof h);\n  return h;\n}\n\n");
  out(e, "// Bytes of the kernels' scratch pool: the most any call of this program takes.\n"
         "static size_t scratch_bytes(void) {\n");
  out(e, "  size_t b = 8 + (size_t)MB * 4; // count_correct's rows\n");
  out(e,
      "  b = at_least(b, pr_cu_reduce_scratch(%lld) + 8); // sums of squares, the largest tensor\n",
      (long long)largest);
  each_node(e, scratch_of, NULL);
  out(e, "  return b;\n}\n\n");
  out(e, "// The attention backward's workspace, one buffer for every call (allocated at setup).\n"
         "static void *cu_ws __attribute__((unused));\nstatic size_t ws_bytes(void) {\n  size_t b "
         "= 256;\n");
  each_node(e, ws_of, NULL);
  out(e, "  return b;\n}\n\n");
  // The data inputs' host staging: loaded there, then uploaded into the tensor's slot.
  for (int k = 0; k < tc->nfeeds; k++) {
    const Tensor *t = tc->feeds[k].t;
    out(e, "static %s stage_%d[%lld] __attribute__((unused)); // host staging of %s\n",
        ctype(t->dtype), k, (long long)numel(e, t), comment(e, t->name));
  }
  out(e, "\n");
}

const char *cu_in(E *e, const Tensor *t, bool held) {
  if (!held) return "NULL";
  if (!e->cuda) return tid(e, t);
  const Feed *f = training_feed_of(e->tc, t);
  return arena_printf(e->a, "stage_%d", (int)(f - e->tc->feeds));
}

const char *cu_upload_inputs(E *e, const bool *held, const char *indent) {
  if (!e->cuda) return "";
  const char *s = "";
  for (int k = 0; k < e->tc->nfeeds; k++)
    if (!held || held[k])
      s = arena_printf(e->a, "%s\n%spr_cu_upload(%s, stage_%d, sizeof stage_%d);", s, indent,
                       tid(e, e->tc->feeds[k].t), k, k);
  return s;
}

const char *cu_scalar(E *e, const Tensor *t) {
  return arena_printf(e->a, e->cuda ? "dev_scalar(%s)" : "%s[0]", tid(e, t));
}
