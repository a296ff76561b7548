// weights.h: the model's "weights" key (docs/model-format.md): a safetensors file, or a sharded
// checkpoint's directory, relative to the model file, holding the program's initial parameters
// (what it loads when given neither --init nor --resume, exactly as --init loads a file). The
// expand pass reads the key (Graph.weights, Graph.weights_loc); this checks the file against the
// model at compile time (pipec check, print, plan, compile, run), reading the safetensors
// headers alone (st_read.h), as the program will match it: every parameter present (a tied one
// may be left out), of dtype F32, BF16 or F16 and of the parameter's shape, and no other tensor.
#ifndef PIPEC_WEIGHTS_H
#define PIPEC_WEIGHTS_H

#include "../ir/ir.h"
#include "source.h"

// The weights file as a path from the working directory: the value as written when it is
// absolute or the model path has no directory, else the model path's directory, '/', the value
// (messages and the depfile name it so).
const char *weights_shown_path(Arena *a, const char *model_path, const char *weights);

// Checks g's weights (nothing without the key): the file exists and is a regular file (or a
// directory with model.safetensors.index.json), its headers are sound and match g's parameters.
// False after reporting one error at the key: "weights: ...".
bool weights_check(const Source *src, const Graph *g, Diag *d);

#endif
