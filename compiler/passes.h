// The compiler passes run by the driver, in order, with the verifier between them.
#ifndef PIPEC_PASSES_H
#define PIPEC_PASSES_H

#include "../ir/ir.h"
#include "source.h"

typedef struct ExpandOptions {
  const char **defines; // "NAME=EXPR" overrides of dims entries (-D)
  int ndefines;         // entries in defines
} ExpandOptions;

// The model format version pass_expand reads (the file's "version"; docs/model-format.md).
enum { MODEL_FORMAT_VERSION = 1 };

// expand: model JSON -> IR graph. Checks the document's structure and names, binds dims,
// instantiates blocks, parses attributes against the op registry, links every input to its
// tensor and sorts the nodes topologically (file order where possible). Shapes of activations
// are left for the shape pass.
bool pass_expand(const Source *src, Graph *g, const ExpandOptions *opt, Diag *d);

// shape: runs each op's shape/dtype rule in topological order; checks the loss is a scalar.
bool pass_shape(Graph *g, Diag *d);

// fuse: unless enabled is false (--no-fuse, or a 16-bit --precision), rewrites SwiGLU's gate
// mul(silu(g), u) into the internal op silu_mul(g, u) where the numbers stay those of the two
// ops (compiler/fuse.c).
bool pass_fuse(Graph *g, bool enabled, Diag *d);

// autodiff: appends input-gradient (B), weight-gradient (W) and step-end nodes for a step of
// `microbatches` microbatches; sets each owner parameter's grad tensor.
bool pass_autodiff(Graph *g, int microbatches, Diag *d);

#endif
