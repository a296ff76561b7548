// The pipec IR: dtypes, shapes with a symbolic batch factor, tensors, nodes and the graph.
//
// A Graph owns every Tensor and Node (all in one arena). Tensors are model inputs, parameters or
// activations (node outputs); after the comm pass also received copies of tensors made on
// another pipeline stage. Shapes are static except for the batch: each dimension is n or n*B,
// where B is the batch symbol bound later by the training configuration (the microbatch size).
// After the expand pass the node list is in a stable topological order (file order where the file
// allows it), every tensor knows its producer and its uses, and the verifier checks all of this.
#ifndef PIPEC_IR_H
#define PIPEC_IR_H

#include <stdbool.h>
#include <stdint.h>

#include "arena.h"
#include "diag.h"
#include "strmap.h"

typedef enum DType {
  DT_F32,  // IEEE float32
  DT_BF16, // bfloat16
  DT_F16,  // IEEE float16
  DT_I32,  // int32 (token ids, class labels)
  DT_COUNT
} DType;

enum { MAX_RANK = 8 };

// Largest element count a tensor may have (per sample, and again once B is bound): 2^53.
#define PIPEC_MAX_NUMEL ((int64_t)1 << 53)

// One dimension: n, or n*B when b is set (B = the batch symbol).
typedef struct Dim {
  int64_t n; // static factor (>= 1; -1 only inside reshape attributes: "infer this one")
  int b;     // 1 when the dimension carries the batch factor B, else 0
} Dim;

typedef struct Shape {
  int rank;        // 0 for a scalar
  Dim d[MAX_RANK]; // outermost first, like PyTorch
} Shape;

typedef enum TensorKind {
  T_INPUT, // model input (data or target), fed by the data loader
  T_PARAM, // trainable parameter
  T_ACT,   // activation: output of a node (gradients included)
  T_CONST, // constant filled once at start (the loss gradient seed 1/M, zeros)
  T_RECV   // received from another stage: no producer; filled by the channel's RECV (comm pass)
} TensorKind;

typedef enum InitKind {
  INIT_ZEROS,   // all 0
  INIT_ONES,    // all 1
  INIT_NORMAL,  // N(a = mean, b = std^2)
  INIT_UNIFORM, // U(a, b)
  INIT_XAVIER   // Xavier/Glorot uniform with gain a
} InitKind;

typedef struct Init {
  InitKind kind; // distribution
  double a;      // mean (normal), low (uniform), gain (xavier)
  double b;      // std (normal), high (uniform)
} Init;

struct Node;

typedef struct Use {
  struct Node *node; // consuming node
  int slot;          // input index in that node
} Use;

typedef struct Tensor {
  int id;                 // index in Graph.tensors
  const char *name;       // unique name (node outputs of multi-output nodes: "name:k")
  TensorKind kind;        // input, param or activation
  DType dtype;            // element type
  Shape shape;            // static shape (batch factor symbolic)
  bool is_target;         // input only: a label read by the loss
  Init init;              // param only: initialiser
  struct Tensor *tied_to; // param only: storage owner, or NULL
  struct Node *producer;  // activation only: producing node
  int out_index;          // activation only: output slot in producer
  Use *uses;              // consumers in graph order (filled by graph_link_uses)
  int nuses;              // number of uses
  Loc loc;                // where it was defined in the model file
  const char *path;       // JSON path of its definition ("params[3]", "nodes[7]")
  bool hidden;            // saved-for-backward output (layernorm mean, attention probs)
  double const_value;     // T_CONST only: every element's value
  struct Tensor *grad_of; // gradient tensors: the tensor this is (a part of) the gradient of
  bool per_step;          // lives across the microbatches of a step (param gradient buffers)
  struct Tensor *grad;    // owner params after autodiff: the parameter's final gradient
  bool half;              // stored in the program's 16-bit precision (--precision bf16|fp16,
                          // compiler/precision.c): 2 bytes per element, computed in f32
} Tensor;

typedef enum AttrType {
  ATTR_INT,   // integer (may be written as a dims expression)
  ATTR_FLOAT, // number
  ATTR_BOOL,  // true / false
  ATTR_INTS,  // list of integers
  ATTR_SHAPE, // list of dimensions (ints, dims expressions, batch symbol, -1 = infer)
  ATTR_ENUM   // one of the names in AttrDef.choices (a string in the file; its index in i)
} AttrType;

typedef struct AttrValue {
  bool present;  // given in the file (else the schema default applies and is stored here)
  int64_t i;     // ATTR_INT, ATTR_BOOL, ATTR_ENUM (index in the choices)
  double f;      // ATTR_FLOAT
  int count;     // ATTR_INTS, ATTR_SHAPE: list length
  int64_t *ints; // ATTR_INTS
  Dim *dims;     // ATTR_SHAPE
} AttrValue;

struct OpDef;

typedef enum NodeRole {
  ROLE_FWD, // forward computation (F)
  ROLE_BWD, // input-gradient (B): gradients of activations
  ROLE_WGT, // weight-gradient (W): accumulates a parameter's gradient over microbatches
  ROLE_STEP // once per step after all microbatches (combining a tied parameter's uses)
} NodeRole;

typedef struct Node {
  int id;                 // index in Graph.nodes (topological after expand)
  const char *name;       // node name (unique)
  const struct OpDef *op; // registry row
  Tensor **in;            // inputs in the op's order
  int nin;                // number of inputs
  Tensor **out;           // outputs
  int nout;               // number of outputs
  AttrValue *attrs;       // parallel to op->attrs
  Loc loc;                // position of the node's object in the model file
  const char *path;       // JSON path, e.g. "nodes[12]" or "blocks[0].nodes[3] (layer 5)"
  int file_order;         // order of appearance after block expansion (tie-break for sorting)
  int stage;              // pipeline hint: stage number, or -1
  bool split_before;      // pipeline hint: a new stage starts here
  int instance;           // block instance index (layer number), or -1 outside blocks
  const char *block;      // block name, or NULL
  NodeRole role;          // F, B, W or step-end
  const struct Node *fwd; // backward nodes: the forward node differentiated
  int slot;               // backward nodes: the input of fwd whose gradient this is, else -1
} Node;

typedef struct DimDef {
  const char *name; // symbol
  Dim value;        // bound value
  Loc loc;          // where it was defined
} DimDef;

typedef struct Graph {
  Arena *arena;          // owner of everything below
  const char *name;      // model name
  const char *batch_sym; // batch symbol, "B" by default
  const char *weights;   // "weights": the initial parameters' file as written (relative to the
                         // model file; NULL: the seeded initialisation; compiler/weights.h)
  Loc weights_loc;       // where the key is
  DimDef *dims;          // dims table, in file order
  int ndims;             // entries in dims
  Tensor **tensors;      // all tensors (inputs, params, activations)
  int ntensors, cap_tensors;
  Node **nodes; // all nodes, topological order after expand
  int nnodes, cap_nodes;
  Tensor **inputs; // model inputs in file order
  int ninputs, cap_inputs;
  Tensor **params; // parameters in canonical (file) order
  int nparams, cap_params;
  Tensor **outputs; // model outputs
  int noutputs;
  Tensor *loss;      // scalar loss tensor
  bool shapes_known; // activations have shapes (set by the shape pass)
  int nfwd;          // nodes [0, nfwd) are the forward graph (autodiff appends after)
  int microbatches;  // M: the loss gradient seed is 1/M (set by autodiff)
  StrMap names;      // tensor name -> Tensor*
  StrMap node_names; // node name -> Node*
} Graph;

// ---- dtypes and shapes (shape.c)
const char *dtype_name(DType t);
int dtype_size(DType t);
// Bytes of one stored element of t: 2 when t->half (--precision), else dtype_size(t->dtype).
int tensor_elem_size(const struct Tensor *t);
bool dtype_parse(const char *s, DType *out);
bool dtype_is_float(DType t);
bool dim_eq(Dim a, Dim b);
bool shape_eq(const Shape *a, const Shape *b);
// Element count with B bound to batch; -1 on overflow past PIPEC_MAX_NUMEL.
int64_t shape_numel(const Shape *s, int64_t batch);
// "(B,64,128)" into buf (at least 256 bytes); batch_sym names B.
const char *shape_str(char *buf, int cap, const Shape *s, const char *batch_sym);
const char *dim_str(char *buf, int cap, Dim d, const char *batch_sym);

// ---- graph construction (graph.c)
void graph_init(Graph *g, Arena *a);
Tensor *graph_add_tensor(Graph *g, const char *name, TensorKind kind);
Node *graph_add_node(Graph *g, const char *name, const struct OpDef *op, int nin, int nout);
Tensor *graph_find(const Graph *g, const char *name);
// Whether t is one of the model's outputs (g->outputs; the loss is not among them).
bool graph_is_output(const Graph *g, const Tensor *t);
// Fills every tensor's uses from the node list (in node order).
void graph_link_uses(Graph *g);

// ---- verifier (verify.c): structural invariants; returns false after reporting errors.
bool graph_verify(const Graph *g, Diag *d);

// ---- printer (print.c): stable, diffable text form.
void graph_print(const Graph *g, FILE *out);

#endif
