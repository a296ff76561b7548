// The op registry: one table row (OpDef) per op holding everything the compiler knows about it —
// arity, attribute schema with defaults, shape/dtype rule, cost per call, the runtime kernel and
// its scalar arguments, which inputs hold indices and their bound, and the gradient rule: a
// small table of declarative entries ("input slot s gets bwd_op(dy, x1)") that the autodiff pass
// interprets, or, for an op whose rule does not fit (split), a function that gets the pass's
// services as a table of function pointers. Nothing here calls into compiler/: the passes read
// this data. Which files an op touches: docs/ops.md, "Adding an op".
#ifndef PIPEC_OPS_H
#define PIPEC_OPS_H

#include "ir.h"

typedef struct AttrDef {
  const char *name;           // attribute name in the model file
  AttrType type;              // value type
  bool required;              // must be given
  int64_t def_i;              // default for ATTR_INT / ATTR_BOOL
  double def_f;               // default for ATTR_FLOAT
  const char *doc;            // one-line description
  const char *const *choices; // ATTR_ENUM: the names it takes, NULL-terminated (def_i indexes them)
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

// Operation codes of the binary ops sharing pr_binary_fwd/pr_binary_bwd (their `op` argument).
typedef enum BinaryCode {
  BIN_ADD = 0, // a + b
  BIN_SUB = 1, // a - b
  BIN_MUL = 2, // a * b
  BIN_DIV = 3  // a / b
} BinaryCode;

// How a transpose/permute row gives its permutation (read by kargs_permute).
typedef enum PermForm {
  PERM_SWAP = 0, // attributes dim0, dim1: swap the two dims
  PERM_LIST = 1  // attribute perm: output dim i is input dim perm[i]
} PermForm;

// An i32 input holding indices: the ids in input `slot` must lie in [0, size of dim `dim` of
// input `of`). embedding: slot 0 indexes dim 0 (the rows) of the weight, input 1;
// cross_entropy: slot 1 holds class indices into the last dim of the logits, input 0.
typedef struct IndexBound {
  int slot;         // input slot holding the i32 indices
  int of;           // the input whose dim they index
  int dim;          // that input's dim; negative counts from the last (-1 = the last)
  const char *what; // what the bound counts, in messages: "rows", "classes"
  bool vocabulary;  // the bound is the model's vocabulary (token ids), named so in data errors
} IndexBound;

// ---- Gradient rules as data

// A tensor a declarative gradient entry passes to its backward op.
typedef enum GradFrom {
  GF_END = 0, // end of the list
  GF_DY,      // the gradient flowing into output k of the forward node
  GF_X,       // input k of the forward node
  GF_Y        // output k of the forward node (hidden outputs follow the visible ones)
} GradFrom;

typedef struct GradTensor {
  GradFrom from; // which kind of tensor
  int k;         // its index (output or input slot)
} GradTensor;

enum {
  MAX_GRAD_IN = 5,      // most inputs of a declared backward node (layernorm.dx)
  GRAD_EVERY_SLOT = -1, // GradEntry.slot: the entry applies to every input slot, in order
};

// One declarative gradient entry: input `slot` of the forward node (when it needs a gradient
// and exists: an optional input may be absent) gets the contribution bwd_op(in...). With
// pass_same_shape, an input of the output's shape gets dy (the gradient of output 0) itself,
// no node (d(a+b)/da = 1). The autodiff pass interprets the entries in order, so their order
// (slot order) is the order the backward nodes appear in.
typedef struct GradEntry {
  int slot;                   // input slot, or GRAD_EVERY_SLOT
  const char *bwd_op;         // internal op computing the contribution; NULL ends the table
  GradTensor in[MAX_GRAD_IN]; // its inputs, GF_END after the last
  bool pass_same_shape;       // pass dy through when the input has the output's shape
} GradEntry;

typedef struct GradCtx GradCtx; // the autodiff pass's state, opaque here (compiler/autodiff.c)

// What a custom gradient rule may ask of the autodiff pass, which fills this table and passes it
// in: the registry never calls the pass by name, so ir/ links without compiler/.
typedef struct GradApi {
  GradCtx *c;   // the pass's state, passed back to every function
  Arena *arena; // the arena of the graph being differentiated
  // Gradient flowing into output k of n, or NULL when none does.
  Tensor *(*output)(GradCtx *c, const Node *n, int k);
  // Whether input slot of n needs a gradient.
  bool (*needed)(GradCtx *c, const Node *n, int slot);
  // Emits internal op bwd_op (with inputs ins) computing n->in[slot]'s gradient contribution.
  // Role and accumulation into parameter gradients are decided by the pass.
  Node *(*emit)(GradCtx *c, const Node *n, int slot, const char *bwd_op, Tensor *const *ins,
                int nin);
  // A constant zero tensor shaped like t (a missing gradient of a multi-output node).
  Tensor *(*zeros)(GradCtx *c, const Tensor *like);
  // Emits one node of internal op bwd_op (with inputs ins) computing the gradient contributions
  // of inputs slots[0..nslots) of n together, its output i that of slots[i] (silu_mul.d: dg and
  // du in one pass). Activations only: returns NULL, emitting nothing, when one of them is a
  // parameter (each use of a parameter accumulates into a buffer of its own). An input that
  // needs no gradient still gets its output, which nothing reads.
  Node *(*emit_joint)(GradCtx *c, const Node *n, const int *slots, int nslots, const char *bwd_op,
                      Tensor *const *ins, int nin);
} GradApi;

// A product that can finish each block of its output 0 with an elementwise op's work while the
// block is in cache (codegen fuses the two calls into `kernel` unless pipec compile --no-fuse).
// The fused kernel takes the product's pointer and scalar arguments and then the epilogue op's, in
// this order: the product's outputs, the epilogue's outputs, the product's inputs, the
// epilogue's inputs but its input 0 (the product's output), the product's scalars, the
// epilogue's scalars, the epilogue's acc (when its op has one); the product's own acc must be 0.
typedef struct FuseDef {
  const char *op;     // the epilogue op (its row has `epilogue`)
  const char *kernel; // the runtime function computing both
  // The kernel reads each piece of the product's inputs before it writes the same piece of the
  // epilogue's outputs: an epilogue output may occupy exactly the place of a product input of
  // its size (the memory plan reuses a buffer that dies at the product).
  bool in_place;
} FuseDef;

typedef struct OpDef {
  const char *name;     // op name in model files
  int min_in;           // fewest inputs
  int max_in;           // most inputs; -1 = any number
  int nout;             // outputs; 0 = count_outputs decides from the attributes
  const AttrDef *attrs; // attribute schema
  int nattrs;           // entries in attrs
  unsigned quiet_attrs; // bit a: attribute a is printed (--print) only when given (attributes
                        // added to an op later: older models' printed graphs stay as they were)
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
  // Its kernel runs long (a GEMM, attention): on a rank with messages in flight the generated
  // code calls MPI's progress right after it, so that a rendezvous completes while the rank
  // computes (codegen/segment.c, runtime/comm_mpi.c).
  bool progress;
  // Reads its input 0 elementwise (each output element from the inputs' elements at its index:
  // gelu) or row by row over the last dim (layernorm), so it may run inside the kernel of the
  // node computing input 0, finishing each block or row of it while in cache (FuseDef).
  bool epilogue;
  const FuseDef *fuse; // the epilogue this product can fuse, or NULL
  // Tells apart the rows sharing one kernel and argument rule: a BinaryCode (add, sub, mul) or a
  // PermForm (transpose, permute); 0 for every other op.
  int variant;
  const IndexBound *ids; // the input holding i32 indices and their bound, or NULL
  // Gradient rule as data: entries ending with a NULL bwd_op (interpreted by the autodiff pass).
  const GradEntry *grads;
  // Gradient rule as code, for an op whose rule no entry can state (split): emits the backward
  // nodes for every input that needs a gradient through the pass's services. Returns false if
  // it cannot differentiate n. Set at most one of grads and grad_rule.
  bool (*grad_rule)(const GradApi *api, const Node *n);
} OpDef;

// Number of visible outputs (without the hidden ones).
int node_visible_outputs(const Node *n);

const OpDef *op_find(const char *name);
int op_count(void);
const OpDef *op_at(int i);
// Index of the attribute called name in op's schema, or -1.
int op_attr_index(const OpDef *op, const char *name);
// The number of valid ids input slot of n may hold (ids lie in [0, bound)) as its op's row
// declares (OpDef.ids), or 0 when that input holds no indices (or the dim bounding them carries
// the batch, so has no static size). Needs the node's shapes.
int64_t op_index_bound(const Node *n, int slot);

// Reports "PATH \"NAME\": MESSAGE" at the node's position.
void node_error(Diag *d, const Node *n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
// Shape as text for messages; returns one of 8 rotating static buffers.
const char *fmt_shape(const Graph *g, const Shape *s);

#endif
