// precision.h: --precision bf16|fp16 (compiler/precision.c): which tensors are stored in 16 bits
// and the bytes that storage and its f32 conversion areas take.
#ifndef PIPEC_PRECISION_H
#define PIPEC_PRECISION_H

#include "program.h"

// --precision bf16|fp16 (precision.c): marks the tensors stored in 16 bits (Tensor.half), a rule
// on each tensor alone (the same at any S); DT_F32 clears every mark. logits: the accuracy's
// (accuracy_logits; NULL: none), kept f32 like the model's outputs.
void precision_mark(Graph *g, DType prec, const Tensor *logits);
// Bytes of the f32 copies node n's kernel call works on: one per 16-bit output then input, in
// the call's order, each rounded up to 64 bytes (codegen lays them out the same way).
int64_t precision_conv_bytes(const Node *n, int64_t batch);
// One 16-bit tensor's f32 copy in the conversion area: its elements' bytes rounded up to 64.
int64_t precision_conv_size(const Tensor *t, int64_t batch);
// Bytes per element of t as stored: 2 for a 16-bit tensor (Tensor.half), else its dtype's.
int precision_elem_size(const Tensor *t);
// Bytes per element of parameter p with everything the step keeps of it: its value (16 bits or
// f32), its f32 gradient, `slots` f32 optimizer states and, stored in 16 bits, its f32 master.
int precision_param_elem_size(const Tensor *p, int slots);
// ", bf16 storage" / ", fp16 storage" for the plans' first lines; "" at f32.
const char *precision_note(DType prec);

#endif
