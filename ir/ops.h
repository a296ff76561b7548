// The op registry: one table row (OpDef) per op holding everything the compiler knows about it —
// arity, attribute schema with defaults, shape/dtype rule, cost per call. Later passes add the
// gradient rule and kernel names to the same row. Adding an op = one row + its kernels.
#ifndef PIPEC_OPS_H
#define PIPEC_OPS_H

#include "ir.h"

typedef struct AttrDef {
  const char *name; // attribute name in the model file
  AttrType type;    // value type
  bool required;    // must be given
  int64_t def_i;    // default for ATTR_INT / ATTR_BOOL
  double def_f;     // default for ATTR_FLOAT
  const char *doc;  // one-line description
} AttrDef;

typedef struct OpCost {
  double flops; // floating-point operations for one call
  double bytes; // bytes read and written (inputs + outputs)
} OpCost;

// One scalar argument of a kernel call (after the pointer arguments).
typedef struct KArg {
  const char *name;   // the kernel parameter's name (a comment in generated code)
  char kind;          // 'i' integer, 'f' float, 'a' integer array, 'x' C expression
  int64_t i;          // 'i'
  double f;           // 'f'
  const int64_t *arr; // 'a': values
  int n;              // 'a': count
  const char *expr;   // 'x': expression text (e.g. "acc")
  // 'i': > 0 when the value is a loss's reduction count (the rows or elements its mean divides
  // by) of per_row x the batch rows; the program passes per_row x the rows it sets (all of a
  // microbatch in training, the real rows of a partial validation batch), so that padding rows
  // are left out of the mean.
  int64_t per_row;
} KArg;

enum { MAX_KARGS = 16 };

typedef struct KArgs {
  KArg a[MAX_KARGS]; // arguments in call order
  int n;             // count
} KArgs;

typedef struct GradCtx GradCtx; // autodiff state (compiler/autodiff.c)

typedef struct OpDef {
  const char *name;     // op name in model files
  int min_in;           // fewest inputs
  int max_in;           // most inputs; -1 = any number
  int nout;             // outputs; 0 = count_outputs decides from the attributes
  const AttrDef *attrs; // attribute schema
  int nattrs;           // entries in attrs
  // Number of outputs from the (already parsed) attributes, for nout == 0.
  int (*count_outputs)(const Node *n);
  // Shape/dtype rule: checks inputs and attributes, sets every output's shape and dtype.
  // Reports errors through node_error and returns false on error.
  bool (*infer)(const Graph *g, Node *n, Diag *d);
  // Cost of one call with the batch symbol bound to batch.
  void (*cost)(const Node *n, int64_t batch, OpCost *c);
  const char *doc;           // one-line summary
  bool internal;             // backward/helper op: not accepted in model files
  int nhidden;               // outputs saved for backward, after the visible ones
  const char *const *hidden; // their name suffixes ("mean", "rstd", "att")
  const char *kernel;        // runtime function the generated code calls
  // Scalar kernel arguments for one call with the batch symbol bound to batch.
  void (*kargs)(const Node *n, int64_t batch, Arena *a, KArgs *out);
  // Scratch bytes the kernel needs (passed after the inputs), or NULL.
  int64_t (*workspace)(const Node *n, int64_t batch);
  bool acc; // the kernel ends with an `acc` flag (accumulate into the output)
  // Gradient rule: emits the backward nodes for every input that needs a gradient (grad_*).
  bool (*grad)(GradCtx *c, const Node *n);
} OpDef;

// ---- The gradient-rule interface (implemented by the autodiff pass)

// Gradient flowing into output k of n, or NULL when none does.
Tensor *grad_output(GradCtx *c, const Node *n, int k);
// Whether input slot of n needs a gradient.
bool grad_needed(GradCtx *c, const Node *n, int slot);
// Emits internal op bwd_op (with inputs ins) computing n->in[slot]'s gradient contribution.
// Role and accumulation into parameter gradients are decided by the pass. Returns the node so
// the rule can set its attributes.
Node *grad_emit(GradCtx *c, const Node *n, int slot, const char *bwd_op, Tensor *const *ins,
                int nin);
// Passes t on as the gradient contribution for n->in[slot] unchanged (d(a+b)/da = 1 with equal
// shapes): no node for an activation; a parameter still gets its accumulation node.
void grad_pass(GradCtx *c, const Node *n, int slot, Tensor *t);
// The arena of the graph being differentiated.
Arena *grad_arena(GradCtx *c);
// A constant zero tensor shaped like t (a missing gradient of a multi-output node).
Tensor *grad_zeros(GradCtx *c, const Tensor *like);
// Number of visible outputs (without the hidden ones).
int node_visible_outputs(const Node *n);

const OpDef *op_find(const char *name);
int op_count(void);
const OpDef *op_at(int i);
// Index of the attribute called name in op's schema, or -1.
int op_attr_index(const OpDef *op, const char *name);

// Reports "PATH \"NAME\": MESSAGE" at the node's position.
void node_error(Diag *d, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Shape as text for messages; returns one of 8 rotating static buffers.
const char *fmt_shape(const Graph *g, const Shape *s);

#endif
