// text.c: the bottom of the C back end, the printing helpers every emitter prints through and
// nothing of it calls an emitter: out (the one writer of the generated source), the two escapers
// every model string goes through (comment, cstring), float literals (flit), the names and
// address terms of the plan's tensors (tid, slot_stage, ws_slot_stage, slot_term, region_ptr,
// ctype), and the repeat-block instance a node's call belongs to (segment_node_key: segment.c's
// groups, buckets.c's layers). Lines laid out within 100 columns are wrap.c's, above it.
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "emit.h"

void out(E *e, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfprintf(e->f, fmt, ap);
  va_end(ap);
}

// The two escapers every model string (names, paths, the command line, the plan text) goes
// through on its way into generated C; nothing else may print one.
//
// comment(): text for a comment of either kind (// or /* */) that cannot end or open one, continue
// the line or form a trigraph: printable ASCII only (other bytes and backslash become '_'), a space
// between '*' and '/' (either order) and between two '?', a space before a leading and after a
// trailing '*', '/' or '?' (so that the text around it cannot complete a sequence), at most 200
// characters of the string.
const char *comment(E *e, const char *s) {
  size_t n = strlen(s);
  if (n > 200) n = 200;
  char *c = arena_alloc(e->a, 2 * n + 3), *q = c;
  char prev = 0;
  for (size_t i = 0; i < n; i++) {
    unsigned char ch = (unsigned char)s[i];
    char o = ch < 0x20 || ch >= 0x7f || ch == '\\' ? '_' : (char)ch;
    bool pair = (prev == '*' && o == '/') || (prev == '/' && o == '*') || (prev == '?' && o == '?');
    if (pair || (i == 0 && strchr("*/?", o))) *q++ = ' ';
    *q++ = prev = o;
  }
  if (prev && strchr("*/?", prev)) *q++ = ' ';
  *q = 0;
  return c;
}

// cstring(): a C string literal with the string's exact bytes: '"', '\\' and '?' (trigraphs)
// backslash-escaped, every byte outside printable ASCII as a three-digit octal escape (a digit
// after it cannot extend it). The literal is data only: generated code never passes one that
// holds a model string as a printf format (prCheck's HINT is printed with "%s").
const char *cstring(E *e, const char *s) {
  size_t n = strlen(s);
  char *o = arena_alloc(e->a, n * 4 + 3), *q = o;
  *q++ = '"';
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\' || *p == '?')
      *q++ = '\\', *q++ = (char)*p;
    else if (*p >= 0x20 && *p < 0x7f)
      *q++ = (char)*p;
    else
      q += sprintf(q, "\\%03o", *p);
  }
  *q++ = '"';
  *q = 0;
  return o;
}

// A float literal: 1 -> "1.0f", 1e-05 -> "1e-05f" (always valid C, round-trips float).
const char *flit(E *e, double v) {
  char buf[64];
  snprintf(buf, sizeof buf, "%.9g", v);
  if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
  return arena_printf(e->a, "%sf", buf);
}

const char *const region_ptr[REG_COUNT] = {"params", "grads", "optst", "acts"};

const char *tid(E *e, const Tensor *t) {
  e->used[t->id] = true;
  return e->ident[t->id];
}

int slot_stage(const E *e, int id) {
  const Plan *p = e->p;
  if (!p->vstage || p->vstage[id] < 0 || p->cls[id] == BUF_WORK) return -1; // one address
  return p->slots[p->vstage[id]] > 1 ? p->vstage[id] : -1;
}

int ws_slot_stage(const E *e, const Node *n) {
  int v = e->prog->vstage_of_node ? e->prog->vstage_of_node[n->id] : -1;
  if (e->p->work_bytes > 0 && e->p->ws_offset[n->id] >= e->p->work_base)
    return -1; // in the work area (--recompute, or a temporary of a stage with K > 1)
  return v >= 0 && e->p->slots && e->p->slots[v] > 1 ? v : -1;
}

const char *slot_term(E *e, int v) {
  return v < 0 ? "" : arena_printf(e->a, " + slot * STRIDE_%d", v); // (STRIDE_v: long long)
}

const char *ctype(DType t) {
  return t == DT_I32 ? "int32_t" : "float";
}

void segment_node_key(const Node *n, const char **blk, int *inst) {
  *blk = n->block;
  *inst = n->instance;
  if (n->block || !n->nout) return;
  const Tensor *of = n->out[0]->grad_of; // a gradient sum: the instance of what it differentiates
  if (of && of->producer && of->producer->block) {
    *blk = of->producer->block;
    *inst = of->producer->instance;
  }
}
