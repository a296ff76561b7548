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
  const char *doc; // one-line summary
} OpDef;

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
