// expand.h: what the files of the expand pass share (internal to it): the parser state X, the
// dims, blocks and node instantiations it collects, and the functions one file calls in another
// (prefix ex_). The pass itself is pass_expand (passes.h); its files, each with one job:
//   expand.c         the pass entry and the walk over the document (top-level keys, version,
//                    loss and outputs, the order of the steps), JSON path helpers
//   expand_names.c   the model namespace: name rules, "{i}" substitution, duplicates, references
//   expand_dims.c    dims (values or expressions, -D overrides, cycles), dimensions and shapes
//   expand_params.c  inputs and params (dtype, shape, init, tied_to)
//   expand_nodes.c   op nodes: the op, its attributes against the registry's schema, outputs,
//                    stage hints, and the resolution of every node input
//   expand_blocks.c  blocks and the repeat entries that instantiate them
//   toposort.c       the topological sort (file order where possible) and cycle reports
#ifndef PIPEC_EXPAND_H
#define PIPEC_EXPAND_H

#include "../ir/ops.h"
#include "dimexpr.h"
#include "json.h"
#include "passes.h"

enum { MAX_NAME = 1024, MAX_REPEAT = 100000, MAX_DIM_DEPTH = 100 };

typedef struct DimSlot {
  const char *name;     // dim symbol
  const cJSON *item;    // its value in the file (NULL for -D only)
  const char *override; // -D value, or NULL
  int state;            // 0 = not resolved, 1 = resolving, 2 = done
  Dim value;            // resolved value
  Loc loc;              // where defined
} DimSlot;

typedef struct BlockDef {
  const char *name;     // block name
  const cJSON *obj;     // its JSON object
  const char *path;     // "blocks[k]"
  const cJSON *inputs;  // formal input names
  const cJSON *outputs; // output names (with {i})
  const cJSON *params;  // params array or NULL
  const cJSON *nodes;   // nodes array
  int nin;              // number of formal inputs
} BlockDef;

typedef struct Spec {
  const cJSON *obj;     // the node's JSON object
  Node *node;           // the node created for it
  const BlockDef *blk;  // block, or NULL at top level
  int inst;             // instance index inside the block
  const char **actuals; // block only: global name bound to each formal input
} Spec;

typedef struct X {
  JsonIn j;            // the document, diagnostics and the graph's arena (json.h)
  Graph *g;            // graph being built
  StrMap dims;         // name -> DimSlot*
  StrMap blocks;       // name -> BlockDef*
  Spec *specs;         // node instantiations in file order
  int nspecs, cap;     // count and capacity
  int ndim_slots;      // dims created (for ordering)
  DimSlot **dim_order; // dims in file order
  int dim_depth; // dims being resolved, one inside another's expression (bounds the recursion)
} X;

// expand.c: "base.key" and "base[i]", in the graph's arena.
const char *ex_pathk(X *x, const char *base, const char *key);
const char *ex_path_idx(X *x, const char *base, int i);

// expand_names.c
// A name as defined in the file: printable, no ':' and (outside blocks) no braces.
bool ex_check_name(X *x, const cJSON *it, const char *path, const char *name, bool in_block);
// name with "{i}" replaced by inst (NULL after an error: any other brace, too long).
const char *ex_subst(X *x, const cJSON *it, const char *path, const char *name, int inst);
// Reserves name in the model namespace; reports a duplicate with the first definition's place.
bool ex_name_free(X *x, const cJSON *it, const char *path, const char *name);
// The tensor ref names (NULL after an error that explains multi-output nodes and suggests near
// names); `what` is "input" or "tensor" in the message.
Tensor *ex_resolve(X *x, const cJSON *it, const char *path, const char *ref, const char *what);

// expand_dims.c
// Evaluates a dim expression over the model's dims (resolved on demand) and the batch symbol.
bool ex_eval_expr(X *x, const char *expr, Dim *out, char *err, int errcap);
// letters, digits and '_', not starting with a digit
bool ex_is_ident(const char *s);
// The dims object and the -D overrides: every dim resolved, in file order, into g->dims.
bool ex_parse_dims(X *x, const cJSON *root, const ExpandOptions *opt);
// One dimension from a JSON integer or expression string. allow_infer accepts -1.
bool ex_parse_dim(X *x, const cJSON *it, const char *path, bool allow_infer, Dim *out);
// A shape array; allow_batch lets a dim use the batch symbol.
bool ex_parse_shape(X *x, const cJSON *arr, const char *path, bool allow_batch, Shape *s);

// expand_params.c
bool ex_parse_inputs(X *x, const cJSON *root);
// The params array at base (top level: inst = -1; a block's instance inst: names substituted).
bool ex_parse_params(X *x, const cJSON *arr, const char *base, int inst);

// expand_nodes.c
// Creates the node for an op entry (inputs are resolved later). inst >= 0 inside block blk.
Node *ex_make_node(X *x, const cJSON *c, const char *path, const BlockDef *blk, int inst);
// Appends a node instantiation to x->specs.
void ex_add_spec(X *x, Spec s);
// The nodes array: op nodes and repeat entries, in file order.
bool ex_parse_nodes(X *x, const cJSON *root);
// Links every node input to its tensor (after all nodes exist, so order in the file is free).
bool ex_resolve_inputs(X *x);

// expand_blocks.c
// The blocks array, kept as JSON (BlockDef) until a repeat instantiates it.
bool ex_parse_blocks(X *x, const cJSON *root);
// The global name a block-local reference denotes in instance s->inst.
const char *ex_block_ref(X *x, const Spec *s, const cJSON *it, const char *path, const char *ref);
// A repeat entry of the nodes array: count instances of its block, chained output to input.
bool ex_repeat(X *x, const cJSON *c, const char *path);

// toposort.c: sorts g's nodes topologically, file order where possible, and renumbers their
// ids; reports one cycle if there is one.
bool ex_toposort(Graph *g, Diag *d);

#endif
