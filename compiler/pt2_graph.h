// The importer's view of a torch.export graph (shared by compiler/pt2_graph.c, which reads and
// lowers it, and compiler/pt2_aten.c, the ATen table): values with their shapes, nodes with their
// arguments, lazy layout chains and the emission of pipec nodes into the model document.
#ifndef PIPEC_PT2_GRAPH_H
#define PIPEC_PT2_GRAPH_H

#include "../ir/strmap.h"
#include "pt2_import.h"

enum { IMP_MAX_RANK = 8, IMP_MAX_STEPS = 6, IMP_MAX_DEPS = 8 };

// A size: k, times the batch symbol when b (the export's one dynamic dim).
typedef struct IShape {
  int rank;
  int64_t k[IMP_MAX_RANK]; // static factor of each dim
  bool b[IMP_MAX_RANK];    // the dim carries the batch symbol
} IShape;

// One step of a lazy layout chain.
typedef struct Step {
  bool permute;           // a permute (else a reshape)
  int perm[IMP_MAX_RANK]; // permute: output dim k is input dim perm[k]
  IShape shape;           // the shape after the step
} Step;

typedef enum ValKind {
  VAL_TENSOR, // a tensor computed by a node (its producer lowers it)
  VAL_LAYOUT, // base's tensor through steps (view, permute, ...): no node until realized
  VAL_LEAF,   // a parameter or user input: pipec names it directly
  VAL_CONST,  // a buffer, or computed from buffers only: data known at import
  VAL_SYM,    // a symbolic int (sym_size): sym is its value
  VAL_EXPAND, // expand(src): only the patterns read it (repeat_kv)
} ValKind;

typedef struct ImpNode ImpNode;

typedef struct Val {
  const char *name;  // ATen name ("linear_3")
  ValKind kind;      // see ValKind
  IShape shape;      // (tensors) from tensor_values
  int dtype;         // schema ScalarType code (7: float32, 5: int64)
  ImpNode *producer; // VAL_TENSOR: the node that lowers it; else the node that made it (or NULL)
  const char *pipec; // the pipec tensor, once lowered or realized (NULL: not yet)
  struct Val *base;  // VAL_LAYOUT: the tensor the chain starts at; VAL_EXPAND: its input
  int nsteps;        // VAL_LAYOUT: steps of the chain (0: base itself)
  Step steps[IMP_MAX_STEPS];
  float *data;     // VAL_CONST: values, row-major, f32 (int tensors converted; complex64:
                   // (re, im) pairs)
  int64_t sym_k;   // VAL_SYM: k ...
  bool sym_b;      // ... times the batch symbol when set
  const char *fqn; // VAL_LEAF / buffers: the parameter's or buffer's name
  bool is_input;   // VAL_LEAF: a user input (else a parameter)
  bool is_target;  // user input read as a loss's target
  bool failed;     // lowering it failed (reported): consumers do not report again
  bool visiting;   // on the lowering stack (a second push is a cycle)
} Val;

// A node of the graph.
struct ImpNode {
  const char *target;        // "linear.default" (torch.ops.aten. dropped)
  const char *name;          // the node's name
  const cJSON *inputs;       // its arguments, as in model.json
  const cJSON *json;         // the node
  const struct AtenRow *row; // its table row
  const char *module;        // the innermost module FQN of nn_module_stack ("" at the top)
  const char *py_file;       // the user's Python file and line (the stack trace's last frame
  int py_line;               // outside torch/), NULL: none
  Val *out[8];               // its tensor outputs
  int nout;
  Val *deps[IMP_MAX_DEPS]; // tensors the lowering reads (decided by the row's plan)
  int ndeps;
  bool planned; // deps decided
  void *match;  // the pattern a row matched (its own struct)
};

typedef struct Imp Imp;

// One row of the ATen table.
typedef struct AtenRow {
  const char *target; // "linear.default"
  const char *pipec;  // the pipec op it becomes, for docs and --list ("linear", "(view)")
  // At read time, in graph order: sets the node's output values (kinds, lazy chains, constants,
  // matched patterns). NULL: every output a VAL_TENSOR lowered by lower.
  bool (*read)(Imp *im, ImpNode *n);
  // Lowering: decides n->deps (plan; NULL: every tensor argument) then emits the pipec nodes
  // (lower), every dep lowered by then.
  bool (*plan)(Imp *im, ImpNode *n);
  bool (*lower)(Imp *im, ImpNode *n);
} AtenRow;

struct Imp {
  const Pt2 *p;
  Arena *a;
  Diag *d;
  StrMap vals;  // ATen name -> Val
  StrMap names; // pipec names used -> non-NULL
  StrMap bases; // name stem -> its next suffix (int *): fresh names in constant time
  ImpNode *nodes;
  int nnodes;
  cJSON *doc;        // the model document
  cJSON *jnodes;     // its "nodes"
  cJSON *jparams;    // its "params"
  cJSON *jinputs;    // its "inputs"
  ImpNode *cur;      // the node being lowered (messages)
  const char *layer; // the repeated module ("layers.3") of the last node emitted, "" for none
};

// The table (compiler/pt2_aten.c).
const AtenRow *aten_row(const char *target);
int aten_row_count(void);
const AtenRow *aten_row_at(int i);

// ---- arguments (compiler/pt2_graph.c): by schema name; absent = the schema default
const cJSON *imp_arg(const ImpNode *n, const char *name);
// A tensor argument (NULL after reporting when absent or not a tensor).
Val *imp_tensor(Imp *im, ImpNode *n, const char *name);
bool imp_int(Imp *im, ImpNode *n, const char *name, int64_t def, int64_t *out);
bool imp_float(Imp *im, ImpNode *n, const char *name, double def, double *out);
bool imp_bool(Imp *im, ImpNode *n, const char *name, bool def, bool *out);
// An int list (as_ints, or as_sym_ints whose names are sym values): sizes as IShape.
bool imp_sizes(Imp *im, ImpNode *n, const char *name, IShape *out);
bool imp_ints(Imp *im, ImpNode *n, const char *name, int64_t *v, int *nv, int cap);
// The node's tensor arguments (as_tensor and the entries of as_tensors, in schema order) into out,
// at most cap of them (an unknown name: NULL); returns how many there are, those past cap too.
int imp_tensor_args(Imp *im, const ImpNode *n, Val **out, int cap);
// True when the argument is absent or None.
bool imp_is_none(const ImpNode *n, const char *name);

// ---- reading the graph (compiler/pt2_graph.c)
// Every tensor_values entry of graph as a Val with its shape (sizes as ints or the batch symbol)
// and dtype; false after reporting a shape or dtype pipec cannot read.
bool imp_read_values(Imp *im, const cJSON *graph);
// Sets node n's Python frame (its FILE:LINE for messages) from its stack_trace st: the last
// `File "F", line N` outside torch/.
void imp_py_frame(Imp *im, ImpNode *n, const char *st);

// ---- values
Val *imp_val(Imp *im, const char *name);
Val *imp_new_val(Imp *im, ValKind kind, const IShape *s, int dtype, ImpNode *producer);
bool ishape_eq(const IShape *a, const IShape *b);
const char *ishape_str(Imp *im, const IShape *s);
int64_t ishape_numel_k(const IShape *s); // the product of the static factors
// A lazy chain: v (any tensor value) followed by one more step; folds reshapes, permutes and
// identities. Returns the new VAL_LAYOUT value (or a value equal to v's base when they cancel).
Val *imp_reshape(Imp *im, Val *v, const IShape *to);
Val *imp_permute(Imp *im, Val *v, const int *perm);
// The computed tensor a value reads (itself, a layout's base).
Val *imp_root(Val *v);
// The pipec tensor of v, emitting a layout's reshape/permute nodes (its root lowered already).
const char *imp_realize(Imp *im, Val *v);

// Evaluates a node of constants (compiler/pt2_const.c); true when its output is now VAL_CONST.
bool imp_const_eval(Imp *im, ImpNode *n);

// ---- emission
// A fresh pipec node name from the current node's module ("layers.0.attention.wq") and a hint.
const char *imp_name(Imp *im, const char *hint);
// The same, but a leaf module's node reading its own parameter param ("wq.weight") is named after
// the module ("layers.0.attention.wq") when that name is free.
const char *imp_name_of(Imp *im, const char *hint, const Val *param);
// Appends a node {name, op, inputs, attrs} (attrs taken over; NULL: none).
void imp_emit(Imp *im, const char *name, const char *op, const char **inputs, int n, cJSON *attrs);
cJSON *imp_shape_json(const IShape *s);
// Reports at the current node's Python line (or the node's name): "error: MESSAGE (node NAME)".
void imp_error(Imp *im, const ImpNode *n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
