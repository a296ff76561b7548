// The torch.export front end: the graph of an opened archive (compiler/pt2.h) rewritten as a pipec
// model document (docs/model-format.md), the same JSON `pipec import` writes and the JSON front end
// reads, so that a .pt2 and its imported JSON compile to the same program (docs/import.md).
//
// How: compiler/pt2_graph.c reads the graph (every value's shape and dtype from tensor_values,
// the signature's parameters, buffers and user inputs, each node's arguments by name) and lowers it
// on demand from the loss: layout nodes (view, permute, unsqueeze, clone, ...) compose lazily and
// only become reshape/permute nodes where a consumer needs their tensor, so that the view/permute
// pairs around scaled_dot_product_attention cancel; compiler/pt2_aten.c is the ATen table (one row
// per target and overload) and its patterns (RoPE's two forms into rope, mean(pow(sub)) into
// mse_loss, repeat_kv into the attention's n_kv_head, buffers of RoPE tables checked against the
// recipe). Every node whose target has no row is reported, with the user's Python line from its
// stack_trace, before anything is lowered.
#ifndef PIPEC_PT2_IMPORT_H
#define PIPEC_PT2_IMPORT_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "../ir/arena.h"
#include "../ir/diag.h"
#include "pt2.h"

typedef struct Pt2ImportOptions {
  const char *name;    // the model's name ("nanogpt": the archive's stem)
  const char *weights; // the model's "weights" key (a safetensors file), NULL: none
  cJSON *training;     // the training section to embed (taken over), NULL: none
} Pt2ImportOptions;

// Lowers p's graph to a pipec model document (*out, the caller deletes it). False after reporting
// every error through d (unsupported targets at their Python lines; d->file is restored).
bool pt2_import(const Pt2 *p, const Pt2ImportOptions *o, cJSON **out, Arena *a, Diag *d);

#endif
