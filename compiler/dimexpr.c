// Recursive-descent evaluator for dimension expressions (grammar in dimexpr.h).
#include "dimexpr.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/diag.h"

enum { MAX_PARENS = 256, MAX_SHOWN = 200 };

// Parentheses open in every evaluation under way (one evaluates another through a name's lookup).
static _Thread_local int parens_open;

typedef struct P {
  const char *s;    // whole expression as shown in messages (shortened with "..." when long)
  const char *p;    // cursor
  DimLookup lookup; // name resolver
  void *ctx;        // resolver context
  char *err;        // message buffer
  int errcap;       // its size
  bool failed;      // an error was reported
  int depth;        // parentheses open at the cursor in this expression
} P;

static bool fail(P *p, const char *fmt, const char *arg) {
  if (!p->failed) snprintf(p->err, (size_t)p->errcap, fmt, arg);
  p->failed = true;
  return false;
}

static void ws(P *p) {
  while (*p->p == ' ') p->p++;
}

static bool expr(P *p, Dim *out);

// The character at the cursor is not allowed there.
__attribute__((noinline)) static bool unexpected(P *p) {
  unsigned char c = (unsigned char)*p->p;
  char msg[MAX_SHOWN + 80];
  if (c > 0x20 && c < 0x7f)
    snprintf(msg, sizeof msg, "unexpected '%c' in dimension expression '%s'", c, p->s);
  else
    snprintf(msg, sizeof msg, "unexpected byte 0x%02x in dimension expression '%s'", c, p->s);
  return fail(p, "%s", msg);
}

// Too many parentheses open (see parens_open).
__attribute__((noinline)) static bool too_deep(P *p) {
  char msg[MAX_SHOWN + 160];
  if (p->depth == parens_open)
    snprintf(
        msg, sizeof msg,
        "dimension expression '%.16s...' nests too deeply (more than %d levels of parentheses)",
        p->s, MAX_PARENS);
  else
    snprintf(msg, sizeof msg,
             "dimension expression '%s' nests too deeply (more than %d levels of parentheses, with "
             "those of the "
             "expressions that use it)",
             p->s, MAX_PARENS);
  return fail(p, "%s", msg);
}

// A dim name at the cursor, through the lookup (kept out of factor, which recurses: its buffers
// would be on the stack once per level of parentheses).
__attribute__((noinline)) static bool name_value(P *p, Dim *out) {
  const char *b = p->p;
  while (isalnum((unsigned char)*p->p) || *p->p == '_') p->p++;
  char name[128];
  size_t n = (size_t)(p->p - b);
  if (n >= sizeof name) return fail(p, "name too long in dimension expression '%s'", p->s);
  memcpy(name, b, n);
  name[n] = 0;
  int r = p->lookup(p->ctx, name, out, p->err, p->errcap);
  if (r < 0) {
    p->failed = true;
    return false;
  }
  if (r == 0) {
    char msg[256];
    snprintf(msg, sizeof msg, "unknown dim '%s'", name);
    return fail(p, "%s", msg);
  }
  return true;
}

static bool factor(P *p, Dim *out) {
  ws(p);
  if (*p->p == '(') {
    // The parser recurses once per level, also through a name's lookup into another dim's
    // expression: bound the levels open in all of them together, so the stack stays small.
    if (parens_open == MAX_PARENS) return too_deep(p);
    p->p++;
    p->depth++, parens_open++;
    bool ok = expr(p, out);
    p->depth--, parens_open--;
    if (!ok) return false;
    ws(p);
    if (*p->p != ')') return fail(p, "missing ')' in dimension expression '%s'", p->s);
    p->p++;
    return true;
  }
  if (isdigit((unsigned char)*p->p)) {
    int64_t v = 0;
    while (isdigit((unsigned char)*p->p)) {
      if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, *p->p - '0', &v) ||
          v > PIPEC_MAX_NUMEL)
        return fail(p, "number too large in dimension expression '%s'", p->s);
      p->p++;
    }
    *out = (Dim){v, 0};
    return true;
  }
  if (isalpha((unsigned char)*p->p) || *p->p == '_') return name_value(p, out);
  if (!*p->p) return fail(p, "dimension expression '%s' ends early", p->s);
  return unexpected(p);
}

static bool term(P *p, Dim *out) {
  if (!factor(p, out)) return false;
  for (;;) {
    ws(p);
    char op = *p->p;
    if (op != '*' && op != '/') return true;
    p->p++;
    Dim r;
    if (!factor(p, &r)) return false;
    if (op == '*') {
      if (out->b && r.b) return fail(p, "batch symbol appears twice in a product in '%s'", p->s);
      if (__builtin_mul_overflow(out->n, r.n, &out->n) || out->n > PIPEC_MAX_NUMEL)
        return fail(p, "dimension expression '%s' overflows (more than 2^53)", p->s);
      out->b |= r.b;
    } else {
      if (r.b) return fail(p, "cannot divide by the batch symbol in '%s'", p->s);
      if (r.n == 0) return fail(p, "division by zero in dimension expression '%s'", p->s);
      if (out->n % r.n != 0)
        return fail(p, "division is not exact in dimension expression '%s'", p->s);
      out->n /= r.n;
    }
  }
}

static bool expr(P *p, Dim *out) {
  if (!term(p, out)) return false;
  for (;;) {
    ws(p);
    char op = *p->p;
    if (op != '+' && op != '-') return true;
    p->p++;
    Dim r;
    if (!term(p, &r)) return false;
    if (out->b || r.b) return fail(p, "the batch symbol may only multiply, in '%s'", p->s);
    if (op == '+' ? __builtin_add_overflow(out->n, r.n, &out->n)
                  : __builtin_sub_overflow(out->n, r.n, &out->n))
      return fail(p, "dimension expression '%s' overflows", p->s);
    if (out->n > PIPEC_MAX_NUMEL)
      return fail(p, "dimension expression '%s' overflows (more than 2^53)", p->s);
  }
}

bool dimexpr_eval(const char *s, DimLookup lookup, void *ctx, Dim *out, char *err, int errcap) {
  // Control bytes escaped (a JSON escape puts them in a string; a message is one line), then cut.
  char shown[MAX_SHOWN + 4], *esc = diag_printable(s);
  const char *e = esc ? esc : s;
  snprintf(shown, sizeof shown, "%.*s%s", MAX_SHOWN, e, strlen(e) > MAX_SHOWN ? "..." : "");
  free(esc);
  P p = {shown, s, lookup, ctx, err, errcap, false, 0};
  if (!expr(&p, out)) return false;
  ws(&p);
  if (*p.p) return unexpected(&p);
  return true;
}
