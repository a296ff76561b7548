// wrap.c: generated lines within WRAP_COLUMNS (100) columns, as a reader's editor shows them.
//
// out_stmt prints one statement with its trailing note (a comment's text): on one line when it
// fits; else the note on its own line above and the statement on the next; a statement that does
// not fit alone is a call broken after the commas between its arguments (never inside a compound
// literal, a string literal or a comment), the continuation lines aligned after the call's '(' (or
// indented 4 more when an argument does not fit there), as clang-format breaks them. out_define
// does the same for an object-like macro, its value continued after a backslash when the name and
// value do not fit together. cstring_split is cstring's literal as adjacent literals, one per line
// of the string and none over the width. The text is only laid out: the tokens are the same.
#include <stdlib.h>
#include <string.h>

#include "emit.h"

enum { WRAP_COLUMNS = 100 }; // the widest line printed (clang-format's ColumnLimit here)

// The end of the argument that starts at s: the ',' at depth 0 after it, or the call's closing
// ')' (depth -1), or the end of the text; string literals and /* */ comments skipped whole.
static const char *arg_end(const char *s) {
  int depth = 0, angle = 0; // angle: open PtrList< (the CUDA target's C++ template, emit_cuda.c)
  for (; *s; s++) {
    if (*s == '"') {
      for (s++; *s && *s != '"'; s++)
        if (*s == '\\' && s[1]) s++;
      if (!*s) return s;
    } else if (s[0] == '/' && s[1] == '*') {
      const char *e = strstr(s + 2, "*/");
      if (!e) return s + strlen(s);
      s = e + 1;
    } else if (!strncmp(s, "PtrList<", 8)) {
      depth++, angle++;
      s += 7;
    } else if (*s == '>' && angle > 0) {
      depth--, angle--;
    } else if (*s == '(' || *s == '[' || *s == '{') {
      depth++;
    } else if (*s == ')' || *s == ']' || *s == '}') {
      if (--depth < 0) return s;
    } else if (*s == ',' && depth == 0) {
      return s;
    }
  }
  return s;
}

// Comment text note as "// " lines at indent of at most WRAP_COLUMNS, broken at spaces (inside a
// word longer than a line where it must: comment() text has no '\\' to continue a line with).
void out_comment(E *e, const char *indent, const char *note) {
  size_t room = WRAP_COLUMNS - strlen(indent) - 3;
  while (*note) {
    size_t n = strlen(note);
    if (n > room) {
      n = room;
      while (n > 0 && note[n] != ' ') n--;
      if (n == 0) n = room;
    }
    out(e, "%s// %.*s\n", indent, (int)n, note);
    note += n;
    while (*note == ' ') note++;
  }
}

typedef struct Pieces {
  const char *s[512]; // each piece's text (an argument and its ',', or the call's rest)
  size_t len[512];    // its length
  int n;              // count
} Pieces;

// Splits s[0..n) after each ',' at depth 0 into pieces (false: too many).
static bool split(const char *s, size_t n, Pieces *p) {
  const char *end = s + n;
  while (s < end) {
    if (p->n == 512) return false;
    const char *x = arg_end(s);
    x = x < end && *x == ',' ? x + 1 : end;
    p->s[p->n] = s, p->len[p->n] = (size_t)(x - s), p->n++;
    s = x;
    while (s < end && *s == ' ') s++;
  }
  return true;
}

// The statement's call arguments as pieces that fit in room columns: split between the
// arguments, an argument too wide between the elements of its braces; false when one does not.
static bool call_pieces(const char *args, size_t room, Pieces *p) {
  Pieces top = {.n = 0};
  if (!split(args, strlen(args), &top)) return false;
  p->n = 0;
  for (int k = 0; k < top.n; k++) {
    const char *s = top.s[k], *brace = memchr(s, '{', top.len[k]);
    if (top.len[k] <= room || !brace) {
      if (p->n == 512) return false;
      p->s[p->n] = s, p->len[p->n] = top.len[k], p->n++;
      continue;
    }
    // "(const float *const[]){a, b}," as "(const float *const[]){a," and "b},"
    const char *in = brace + 1;
    while (*in == '{') in++; // PtrList<T, n>{{a, b}} (emit_cuda.c)
    Pieces sub = {.n = 0};
    if (!split(in, top.len[k] - (size_t)(in - s), &sub) || sub.n == 0) return false;
    sub.len[0] += (size_t)(in - s), sub.s[0] = s;
    for (int j = 0; j < sub.n; j++) {
      if (p->n == 512) return false;
      p->s[p->n] = sub.s[j], p->len[p->n] = sub.len[j], p->n++;
    }
  }
  for (int k = 0; k < p->n; k++)
    if (p->len[k] > room) return false;
  return true;
}

// Statement stmt broken into lines of at most WRAP_COLUMNS: a call ("name(args...);") between its
// arguments, an assignment of a compound literal ("x = (T){a, b};") or an initializer
// (".x = {.a = 1, .b = 2},") between its elements, a declaration with a value ("T *x = value;")
// after its '='; false when it is neither or a piece does not fit even at indent + 4 (then it is
// left whole).
static bool out_broken(E *e, const char *indent, const char *stmt, const char *note) {
  size_t ind = strlen(indent), head = strcspn(stmt, "( =");
  char *buf = NULL;
  size_t blen = 0, col;
  FILE *f;
  bool call = stmt[head] == '(' && head > 0; // name(
  const char *lit = strstr(stmt, " = ("), *close = lit ? strchr(lit, ')') : NULL;
  if (call)
    head++;
  else if (lit && strchr(stmt, '(') == lit + 3 && close && close[1] == '{')
    call = true, head = (size_t)(close + 2 - stmt); // a compound literal: x = (T){
  else if ((lit = strstr(stmt, " = {")) && (!strchr(stmt, '(') || strchr(stmt, '(') > lit))
    call = true, head = (size_t)(lit + 4 - stmt); // an initializer: x = {
  if (call) {
    Pieces *p = calloc(1, sizeof *p);
    size_t cont = ind + head;
    if (!call_pieces(stmt + head, WRAP_COLUMNS - cont, p)) {
      cont = ind + 4;
      if (!call_pieces(stmt + head, WRAP_COLUMNS - cont, p)) {
        free(p);
        return false;
      }
    }
    f = open_memstream(&buf, &blen);
    fprintf(f, "%s%.*s", indent, (int)head, stmt);
    col = ind + head;
    bool fresh = true; // no argument on the line yet
    if (cont != ind + head) fprintf(f, "\n%*s", (int)cont, ""), col = cont;
    for (int k = 0; k < p->n; k++) {
      if (!fresh && col + 1 + p->len[k] > WRAP_COLUMNS) {
        fprintf(f, "\n%*s", (int)cont, "");
        col = cont, fresh = true;
      }
      if (!fresh) fputc(' ', f), col++;
      fprintf(f, "%.*s", (int)p->len[k], p->s[k]);
      col += p->len[k], fresh = false;
    }
    free(p);
  } else {
    const char *eq = strstr(stmt, " = ");
    const char *par = strchr(stmt, '(');
    if (!eq || (par && par < eq) || ind + 4 + strlen(eq + 3) > WRAP_COLUMNS) return false;
    f = open_memstream(&buf, &blen);
    fprintf(f, "%s%.*s =\n%s    %s", indent, (int)(eq - stmt), stmt, indent, eq + 3);
    col = ind + 4 + strlen(eq + 3);
  }
  fclose(f);
  if (note && col + 4 + strlen(note) <= WRAP_COLUMNS)
    out(e, "%s // %s\n", buf, note);
  else {
    if (note) out_comment(e, indent, note);
    out(e, "%s\n", buf);
  }
  free(buf);
  return true;
}

void out_stmt(E *e, const char *indent, const char *stmt, const char *note) {
  size_t w = strlen(indent) + strlen(stmt);
  if (note && w + 4 + strlen(note) <= WRAP_COLUMNS)
    out(e, "%s%s // %s\n", indent, stmt, note);
  else if (w <= WRAP_COLUMNS && note)
    out_comment(e, indent, note), out(e, "%s%s\n", indent, stmt);
  else if (w <= WRAP_COLUMNS || !out_broken(e, indent, stmt, note))
    out(e, note ? "%s%s // %s\n" : "%s%s\n", indent, stmt, note);
}

void out_define(E *e, const char *name, const char *value, const char *note) {
  size_t w = strlen("#define  ") + strlen(name) + strlen(value);
  if (note && w + 4 + strlen(note) <= WRAP_COLUMNS)
    out(e, "#define %s %s // %s\n", name, value, note);
  else {
    if (note) out_comment(e, "", note);
    if (w <= WRAP_COLUMNS)
      out(e, "#define %s %s\n", name, value);
    else
      out(e, "#define %s \\\n  %s\n", name, value);
  }
}

const char *cstring_split(E *e, const char *s, const char *indent) {
  const char *lit = cstring(e, s);                            // '"' ... '"', its escapes whole
  size_t ind = strlen(indent), room = WRAP_COLUMNS - ind - 3; // a line: indent "...";
  char *buf = NULL;
  size_t blen = 0;
  FILE *f = open_memstream(&buf, &blen);
  const char *p = lit + 1, *end = lit + strlen(lit) - 1;
  bool first = true;
  while (p < end) {
    // One line's literal: up to a "\012" (a newline of the string) or the room, escapes whole.
    const char *q = p, *cut = NULL;
    while (q < end) {
      size_t step = *q == '\\' ? (q[1] >= '0' && q[1] <= '7' ? 4 : 2) : 1;
      if ((size_t)(q + step - p) > room) break;
      q += step;
      if (!strncmp(q - step, "\\012", 4) && step == 4) {
        cut = q;
        break;
      }
    }
    if (!cut) cut = q > p ? q : p + 1;
    fprintf(f, "%s%s\"%.*s\"", first ? "" : "\n", first ? "" : indent, (int)(cut - p), p);
    first = false;
    p = cut;
  }
  if (first) fputs("\"\"", f);
  fclose(f);
  const char *r = arena_strdup(e->a, buf);
  free(buf);
  return r;
}
