// loop_names.c: what a loop over repeat-block instances calls an operand, as llm.c's
// `float *l_ln1w = params.ln1w + l * C;` does.
//
// The loop's instances name their operands alike but for the instance number:
// "transformer.h.0.ln_1" in the first, "transformer.h.1.ln_1" in the second. loop_name reads the
// names of all the instances: the digit runs that step by the same amount from one instance to
// the next become the loop variable ("[l]", "[1 - l]" for a loop that runs backwards, "[l + 1]"
// for the next instance's), the rest must be equal. The comment is that pattern
// ("transformer.h[l].ln_1", through comment(): a model string); the identifier is "l_" (a
// gradient, "d:...": "dl_") and the letters and digits of what follows the first varying number,
// the block's prefix dropped where it recurs ("d:transformer.h.0.resid_1@transformer.h.0.ln_2#0"
// -> dl_resid_1_ln_2_0), every other byte '_', at most 40 of them: a C identifier that no macro,
// keyword or runtime name of the generated program can be (those are t<id>_..., upper case or
// pr_...). A boundary operand, whose first (or last) instance's name is another tensor's (the
// first layer reads the embedding where the others read the previous layer's output), is the
// pattern of the others with the exception beside it ("transformer.h[l - 1].out (l = 0:
// transformer.emb)"); names of no pattern are given with their l (the first and the last of more
// than 3). The caller makes the identifiers of one loop unique.
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { MAX_TOKENS = 64, IDENT_BODY = 40 };

typedef struct Tok {
  const char *s; // the token's text in the name (a digit run or the text between two)
  int len;       // its length
  bool digits;   // a digit run
} Tok;

// The name's tokens (false: too many).
static bool tokenize(const char *s, Tok *t, int *n) {
  *n = 0;
  while (*s) {
    if (*n == MAX_TOKENS) return false;
    bool d = *s >= '0' && *s <= '9';
    const char *b = s;
    while (*s && (*s >= '0' && *s <= '9') == d) s++;
    t[(*n)++] = (Tok){b, (int)(s - b), d};
  }
  return true;
}

static long long tok_value(const Tok *t) {
  return t->len > 18 ? -1 : strtoll(t->s, NULL, 10);
}

// Appends the letters and digits of s[0..n) to the identifier body id (others as one '_').
static void ident_append(char *id, size_t *len, const char *s, int n) {
  for (int i = 0; i < n && *len < IDENT_BODY; i++) {
    char c = s[i];
    bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
    if (alnum)
      id[(*len)++] = c;
    else if (*len && id[*len - 1] != '_')
      id[(*len)++] = '_';
  }
  id[*len] = 0;
}

typedef struct Pattern {
  Tok t[MAX_TOKENS];          // the tokens of the first name matched
  int n;                      // count
  long long base[MAX_TOKENS]; // a varying digit run: its value at l = 0 (may be negative)
  long long step[MAX_TOKENS]; // its step per instance (0: fixed)
} Pattern;

// Whether names[from..to) (at l = from ..) are one pattern (at least two of them).
static bool match(const char *const *names, int from, int to, Pattern *p) {
  Tok tj[MAX_TOKENS];
  int nj;
  if (to - from < 2 || !tokenize(names[from], p->t, &p->n)) return false;
  for (int k = 0; k < p->n; k++) p->step[k] = p->base[k] = 0;
  for (int j = from + 1; j < to; j++) {
    if (!tokenize(names[j], tj, &nj) || nj != p->n) return false;
    for (int k = 0; k < p->n; k++) {
      const Tok *a = &p->t[k], *b = &tj[k];
      if (a->digits != b->digits) return false;
      if (!a->digits || (a->len > 1 && a->s[0] == '0')) { // text, or "07": equal
        if (a->len != b->len || memcmp(a->s, b->s, (size_t)a->len)) return false;
        continue;
      }
      long long v0 = tok_value(a), v = tok_value(b);
      if (j == from + 1) p->step[k] = v - v0;
      if (v0 < 0 || v < 0 || v != v0 + (long long)(j - from) * p->step[k]) return false;
      p->base[k] = v0 - (long long)from * p->step[k];
    }
  }
  return true;
}

// The pattern's text with each varying run as its index ("transformer.h[l].ln_1").
static const char *pattern_text(E *e, const Pattern *p) {
  size_t n = 1;
  for (int k = 0; k < p->n; k++) n += (size_t)p->t[k].len + 64;
  char *buf = arena_alloc(e->a, n), *q = buf;
  for (int k = 0; k < p->n; k++) {
    long long b = p->base[k], s = p->step[k];
    if (!s) {
      memcpy(q, p->t[k].s, (size_t)p->t[k].len);
      q += p->t[k].len;
      continue;
    }
    char l[32];
    snprintf(l, sizeof l, s == 1 || s == -1 ? "l" : "%lld * l", llabs(s));
    if (q > buf && q[-1] == '.') q--; // h.0 -> h[l]
    if (s > 0)
      q += b == 0 ? sprintf(q, "[%s]", l)
                  : sprintf(q, "[%s %c %lld]", l, b > 0 ? '+' : '-', llabs(b));
    else
      q += sprintf(q, "[%lld - %s]", b, l);
  }
  *q = 0;
  return buf;
}

// The identifier's body: what follows the first varying run, the block's prefix (the text before
// that run, less "d:") dropped where it precedes a later one; the whole name (less "d:") when no
// run varies.
static void pattern_ident(const Pattern *p, bool grad, char *id, size_t *len) {
  int first = 0;
  while (first < p->n && !p->step[first]) first++;
  if (first == p->n) {
    for (int k = 0; k < p->n; k++) {
      int skip = k == 0 && grad ? 2 : 0;
      ident_append(id, len, p->t[k].s + skip, p->t[k].len - skip);
    }
    return;
  }
  const char *pre = first > 0 ? p->t[first - 1].s : "";
  int prelen = first > 0 ? p->t[first - 1].len : 0;
  if (grad && first == 1) pre += 2, prelen -= 2;
  for (int k = first + 1; k < p->n; k++) {
    if (p->step[k]) continue;
    int n = p->t[k].len;
    if (k + 1 < p->n && p->step[k + 1] && prelen > 0 && n >= prelen &&
        !memcmp(p->t[k].s + n - prelen, pre, (size_t)prelen))
      n -= prelen; // "@transformer.h." before a later instance number
    ident_append(id, len, p->t[k].s, n);
  }
  if (!*len) ident_append(id, len, pre, prelen);
}

// The instance prefix of names[0..count) (the text before the first number that varies, less
// "d:", as "transformer.h." in "transformer.h.0.ln_1"), or NULL when they follow no pattern.
const char *loop_prefix(E *e, const char *const *names, int count) {
  Pattern *p = ARENA_ARRAY(e->a, Pattern, 1);
  if (!match(names, 0, count, p)) return NULL;
  for (int k = 1; k < p->n; k++)
    if (p->step[k]) {
      const Tok *t = &p->t[k - 1];
      int skip = k == 1 && !strncmp(t->s, "d:", 2) ? 2 : 0; // a gradient's name
      return t->len > skip ? arena_printf(e->a, "%.*s", t->len - skip, t->s + skip) : NULL;
    }
  return NULL;
}

// The identifier's body of a name that follows no pattern: its letters and digits, less "d:" and
// each instance number with its prefix ("d:transformer.h.1.out@transformer.h.2.ln_1#0@v0" with
// "transformer.h.": out_ln_1_0_v0).
// Returns the first instance number in it (-1: none).
static long long plain_ident(const char *name, const char *prefix, char *id, size_t *len) {
  const char *s = name + (strncmp(name, "d:", 2) ? 0 : 2), *start = s;
  size_t pl = prefix ? strlen(prefix) : 0;
  long long inst = -1;
  while (*s) {
    bool boundary = s == start || !(isalnum((unsigned char)s[-1]) || s[-1] == '.' || s[-1] == '_');
    if (pl && boundary && !strncmp(s, prefix, pl) && isdigit((unsigned char)s[pl])) {
      s += pl;
      if (inst < 0) inst = strtoll(s, NULL, 10);
      while (isdigit((unsigned char)*s)) s++;
      if (*s == '.') s++;
      continue;
    }
    ident_append(id, len, s, 1);
    s++;
  }
  if (!*len) ident_append(id, len, name, (int)strlen(name));
  return inst;
}

// "prev_" or "next_" when pattern p's first varying number is the previous or next instance of
// loop li's, else "".
static const char *relative(const Pattern *p, const LoopInfo *li) {
  for (int k = 0; k < p->n; k++) {
    if (!p->step[k]) continue;
    if (p->step[k] != li->step) return "";
    long long d = p->base[k] - li->first;
    return d == -1 ? "prev_" : d == 1 ? "next_" : "";
  }
  return "";
}

void loop_name(E *e, const char *const *names, int count, const LoopInfo *li, const char *suffix,
               LoopName *r) {
  const char *rel = "";
  Pattern *p = ARENA_ARRAY(e->a, Pattern, 1);
  bool grad = !strncmp(names[0], "d:", 2);
  char id[IDENT_BODY + 1] = "";
  size_t idlen = 0;
  if (match(names, 0, count, p)) {
    r->comment = comment(e, pattern_text(e, p));
    pattern_ident(p, grad, id, &idlen);
    rel = relative(p, li);
  } else if (match(names, 1, count, p)) { // the first instance's is another tensor
    r->comment =
        arena_printf(e->a, "%s (l = 0: %s)", comment(e, pattern_text(e, p)), comment(e, names[0]));
    pattern_ident(p, !strncmp(names[1], "d:", 2), id, &idlen);
    rel = relative(p, li);
  } else if (match(names, 0, count - 1, p)) { // the last instance's
    r->comment = arena_printf(e->a, "%s (l = %d: %s)", comment(e, pattern_text(e, p)), count - 1,
                              comment(e, names[count - 1]));
    pattern_ident(p, grad, id, &idlen);
  } else { // no pattern: each instance's name
    char *buf = NULL;
    size_t blen = 0;
    FILE *f = open_memstream(&buf, &blen);
    for (int j = 0; j < count; j++)
      if (count <= 3 || j == 0 || j == count - 1)
        fprintf(f, "%s%s (l = %d)",
                j == 0       ? ""
                : count <= 3 ? ", "
                             : " .. ",
                comment(e, names[j]), j);
    fclose(f);
    r->comment = arena_strdup(e->a, buf);
    free(buf);
    long long inst = plain_ident(names[0], li->prefix, id, &idlen);
    rel = inst < 0 ? "" : inst == li->first - 1 ? "prev_" : inst == li->first + 1 ? "next_" : "";
  }
  while (idlen && id[idlen - 1] == '_') id[--idlen] = 0;
  r->ident = arena_printf(e->a, "%sl_%s%s%s", grad ? "d" : "", rel, id, suffix ? suffix : "");
}
