// Dimension expressions: "4*C", "C/H", "B*T", "(L+1)*2" — integers and dim names with + - * / and
// parentheses. Values are Dims (n or n*B); the batch symbol may only multiply. Division must be
// exact; every intermediate is checked for overflow.
#ifndef PIPEC_DIMEXPR_H
#define PIPEC_DIMEXPR_H

#include "../ir/ir.h"

// Resolves a name to its value: returns 1 and sets *out, 0 when the name is unknown, -1 when
// resolution failed and the callback already put a message in err.
typedef int (*DimLookup)(void *ctx, const char *name, Dim *out, char *err, int errcap);

// Evaluates expr; on failure returns false with a message (no position) in err.
bool dimexpr_eval(const char *expr, DimLookup lookup, void *ctx, Dim *out, char *err, int errcap);

#endif
