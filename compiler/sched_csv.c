// sched_csv.c: custom schedules in torch.distributed.pipelining's "compute_only" CSV form
// (sched_csv.h). torch reads such a file with csv.reader, one row per rank, and each cell with
// _Action.from_str: the cell stripped of whitespace, "" an idle step, else
// `<stage><type><microbatch>` with type F, I, B, W (or a communication / FSDP action, which a
// compute_only schedule may not hold) and `(A;B)OVERLAP_F_B` for two actions run together. pipec
// reads the same cells (stricter: a cell must be one action and nothing after it, where torch's
// regex takes a prefix) and runs an overlapped pair as its two actions in order. Everything about
// placement and order that pipec's lowering needs is checked here, each error at its cell:
// every stage on one rank, the loop placement (stage v on rank v mod S), each stage's backward
// either B or I then W, and per stage each kind in ascending microbatch order with B or I after
// F and W after I, once per microbatch. What only the lowered schedule shows (a deadlock) is the
// verifier's error, with the grid.
#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"
#include "sched_csv.h"

enum {
  CSV_MAX_INDEX = 1 << 20, // the largest stage or microbatch number read
  CSV_SHOW = 40,           // the most characters of a cell a message quotes
};

// One action as read: the rank of its row, the action, its cell and its form.
typedef struct Cell {
  int rank;  // row
  Action x;  // F, B or W; v the stage
  Loc loc;   // its position (of the action's first character)
  char form; // 'F', 'B', 'I' or 'W' as written
} Cell;

// The reading of one file: the schedule it fills, where errors go, the actions so far.
typedef struct Reader {
  CsvSchedule *cs; // the schedule (its text and lines already read)
  Diag *d;         // errors (sched_csv_error)
  Cell *cells;     // in file order
  int ncells;      // count
  int capcells;    // room in cells (malloc'd: a file's cells are not counted in advance)
} Reader;

// sched_csv_error's body: d reports as the CSV file for one message.
static bool csv_verror(const CsvSchedule *cs, Diag *d, Loc loc, const char *fmt, va_list ap) {
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  const char *file = d->file, *text = d->text;
  size_t len = d->len;
  const size_t *lines = d->lines;
  int nlines = d->nlines;
  d->file = cs->path;
  d->text = cs->text, d->len = cs->len, d->lines = cs->lines, d->nlines = cs->nlines;
  diag_error(d, loc, "%s", msg); // a machine-readable record keeps the CSV's file and line

  d->file = file;
  d->text = text, d->len = len, d->lines = lines, d->nlines = nlines;
  return false;
}

bool sched_csv_error(const CsvSchedule *cs, Diag *d, Loc loc, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  csv_verror(cs, d, loc, fmt, ap);
  va_end(ap);
  return false;
}

static const char *form_name(char form) {
  switch (form) {
  case 'F':
    return "F (forward)";
  case 'B':
    return "B (full backward)";
  case 'I':
    return "I (input-gradient backward)";
  default:
    return "W (weight-gradient backward)";
  }
}

// The action types of torch's _action_regex, in its order (the first that matches is taken).
static const char *const csv_types[] = {"F",       "I",       "B",           "W",
                                        "UNSHARD", "RESHARD", "REDUCE_GRAD", "SEND_F",
                                        "RECV_F",  "SEND_B",  "RECV_B"};

static bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\v' || c == '\f' || c == '\r';
}

// A number of at most CSV_MAX_INDEX at text[*i..e); false when there is no digit.
static bool read_index(const char *t, size_t *i, size_t e, long *v, bool *big) {
  size_t b = *i;
  *v = 0, *big = false;
  for (; *i < e && isdigit((unsigned char)t[*i]); (*i)++) {
    if (*v <= CSV_MAX_INDEX) *v = *v * 10 + (t[*i] - '0');
    if (*v > CSV_MAX_INDEX) *big = true;
  }
  return *i > b;
}

static bool push_cell(Reader *rd, Cell c) {
  if (rd->ncells == rd->capcells) {
    int cap = rd->capcells ? 2 * rd->capcells : 256;
    Cell *n = realloc(rd->cells, (size_t)cap * sizeof *n);
    if (!n) return sched_csv_error(rd->cs, rd->d, c.loc, "out of memory");
    rd->cells = n, rd->capcells = cap;
  }
  rd->cells[rd->ncells++] = c;
  return true;
}

// One compute action at text[b..e) (trimmed, non-empty) of row rank, on line `line` (which
// starts at byte ls: the columns).
static bool parse_one(Reader *rd, int rank, int line, size_t ls, size_t b, size_t e) {
  const char *t = rd->cs->text;
  Loc loc = {line, (int)(b - ls) + 1};
  int n = (int)(e - b) > CSV_SHOW ? CSV_SHOW : (int)(e - b);
  const char *more = (int)(e - b) > CSV_SHOW ? "..." : "";
  size_t i = b;
  long stage, mb;
  bool big;
  if (!read_index(t, &i, e, &stage, &big))
    return sched_csv_error(rd->cs, rd->d, loc,
                           "'%.*s%s': expected an action <stage><F|I|B|W><microbatch> such as 0F0",
                           n, t + b, more);
  if (big)
    return sched_csv_error(rd->cs, rd->d, loc, "'%.*s%s': stage number too large (at most %d)", n,
                           t + b, more, CSV_MAX_INDEX);
  int type = -1;
  for (int k = 0; k < (int)(sizeof csv_types / sizeof *csv_types) && type < 0; k++) {
    size_t l = strlen(csv_types[k]);
    if (e - i >= l && strncmp(t + i, csv_types[k], l) == 0) type = k;
  }
  if (type < 0)
    return sched_csv_error(rd->cs, rd->d, loc,
                           "'%.*s%s': unknown action type (F forward, I input-gradient backward, W "
                           "weight-gradient backward, B full backward)",
                           n, t + b, more);
  if (type >= 4)
    return sched_csv_error(rd->cs, rd->d, loc,
                           "'%.*s%s': %s action: a compute_only schedule lists F, I, B and W only "
                           "(pipec places the sends and receives itself)",
                           n, t + b, more, type >= 7 ? "a communication" : "an FSDP");
  i += 1;
  size_t mb_at = i;
  if (!read_index(t, &i, e, &mb, &big) && i == e)
    return sched_csv_error(rd->cs, rd->d, (Loc){line, (int)(mb_at - ls) + 1},
                           "'%.*s%s': the action has no microbatch (write %.*s0 for microbatch 0)",
                           n, t + b, more, n, t + b);
  if (i == mb_at)
    return sched_csv_error(rd->cs, rd->d, (Loc){line, (int)(i - ls) + 1},
                           "'%.*s%s': unexpected '%.*s' after %.*s (expected its microbatch)", n,
                           t + b, more, (int)(e - i) > CSV_SHOW ? CSV_SHOW : (int)(e - i), t + i,
                           (int)(i - b), t + b);
  if (big)
    return sched_csv_error(rd->cs, rd->d, (Loc){line, (int)(mb_at - ls) + 1},
                           "'%.*s%s': microbatch number too large (at most %d)", n, t + b, more,
                           CSV_MAX_INDEX);
  if (i < e)
    return sched_csv_error(
        rd->cs, rd->d, (Loc){line, (int)(i - ls) + 1},
        "'%.*s%s': unexpected '%.*s' after the action %.*s (one action per cell)", n, t + b, more,
        (int)(e - i) > CSV_SHOW ? CSV_SHOW : (int)(e - i), t + i, (int)(i - b), t + b);
  static const ActionKind kinds[4] = {ACT_F, ACT_B, ACT_B, ACT_W};
  Cell c = {rank, {kinds[type], (int)stage, (int)mb, NULL}, loc, csv_types[type][0]};
  return push_cell(rd, c);
}

// One cell's content text[b..e): trimmed; empty (an idle step) is nothing; `(A;B)OVERLAP_F_B`
// is A then B.
static bool parse_cell(Reader *rd, int rank, int line, size_t ls, size_t b, size_t e) {
  const char *t = rd->cs->text;
  while (b < e && is_space(t[b])) b++;
  while (e > b && is_space(t[e - 1])) e--;
  if (b == e) return true;
  if (t[b] != '(') return parse_one(rd, rank, line, ls, b, e);
  size_t close = b;
  while (close < e && t[close] != ')') close++;
  static const char overlap[] = "OVERLAP_F_B";
  if (close == e || e - close - 1 != strlen(overlap) ||
      strncmp(t + close + 1, overlap, e - close - 1))
    return sched_csv_error(rd->cs, rd->d, (Loc){line, (int)(b - ls) + 1},
                           "'%.*s': expected (ACTION;ACTION)OVERLAP_F_B",
                           (int)(e - b) > CSV_SHOW ? CSV_SHOW : (int)(e - b), t + b);
  for (size_t p = b + 1; p <= close;) {
    size_t q = p;
    while (q < close && t[q] != ';') q++;
    size_t pb = p, pe = q;
    while (pb < pe && is_space(t[pb])) pb++;
    while (pe > pb && is_space(t[pe - 1])) pe--;
    if (pb < pe && !parse_one(rd, rank, line, ls, pb, pe)) return false;
    p = q + 1;
  }
  return true;
}

// The cells of line `line` (text[ls..le), its line break excluded) as row rank; *any: it held
// an action.
static bool parse_row(Reader *rd, int rank, int line, size_t ls, size_t le, bool *any) {
  const char *t = rd->cs->text;
  int before = rd->ncells;
  for (size_t p = ls;;) {
    size_t q = p;
    while (q < le && is_space(t[q])) q++;
    if (q < le && t[q] == '"') { // quoted as RFC 4180: "" is a quote
      size_t b = q + 1, c = b;
      while (c < le && !(t[c] == '"' && (c + 1 >= le || t[c + 1] != '"'))) c += t[c] == '"' ? 2 : 1;
      if (c >= le)
        return sched_csv_error(rd->cs, rd->d, (Loc){line, (int)(q - ls) + 1},
                               "a quoted cell not closed on its line (a cell holds one action)");
      if (!parse_cell(rd, rank, line, ls, b, c)) return false;
      c++;
      while (c < le && is_space(t[c])) c++;
      if (c < le && t[c] != ',')
        return sched_csv_error(
            rd->cs, rd->d, (Loc){line, (int)(c - ls) + 1},
            "unexpected text after a quoted cell (cells are separated by commas)");
      if (c >= le) break;
      p = c + 1;
      continue;
    }
    while (q < le && t[q] != ',') q++;
    if (!parse_cell(rd, rank, line, ls, p, q)) return false;
    if (q >= le) break;
    p = q + 1;
  }
  *any = rd->ncells > before;
  return true;
}

// "stage v on rank r" of the V placement (rank r runs stages r and 2S - 1 - r), else -1.
static int v_rank(int S, int v) {
  return v < S ? v : 2 * S - 1 - v;
}

// The stages' ranks and backward forms, the loop placement; fills cs's per-rank arrays.
static bool check_layout(Reader *rd, Arena *a) {
  CsvSchedule *cs = rd->cs;
  Diag *d = rd->d;
  int S = cs->S, nst = 0;
  for (int i = 0; i < rd->ncells; i++)
    if (rd->cells[i].x.v + 1 > nst) nst = rd->cells[i].x.v + 1;
  int *rank = ARENA_ARRAY(a, int, nst), *first = ARENA_ARRAY(a, int, nst);
  int *bwd = ARENA_ARRAY(a, int, nst); // per stage: the cell of its first B, I or W; -1 none
  for (int v = 0; v < nst; v++) rank[v] = first[v] = bwd[v] = -1;
  for (int i = 0; i < rd->ncells; i++) {
    const Cell *c = &rd->cells[i];
    int v = c->x.v;
    if (rank[v] < 0) {
      rank[v] = c->rank, first[v] = i;
    } else if (rank[v] != c->rank) {
      const Cell *f = &rd->cells[first[v]];
      return sched_csv_error(
          cs, d, c->loc,
          "stage %d on rank %d, but on rank %d at line %d, column %d: a stage runs on "
          "one rank (its row)",
          v, c->rank, f->rank, f->loc.line, f->loc.col);
    }
    if (c->form == 'F') continue;
    if (bwd[v] < 0) {
      bwd[v] = i;
      continue;
    }
    const Cell *f = &rd->cells[bwd[v]];
    if ((f->form == 'B') != (c->form == 'B'))
      return sched_csv_error(
          cs, d, c->loc,
          "stage %d: %s here and %s at line %d, column %d: a stage's backward is B "
          "(unsplit) or I then W (split) for every microbatch",
          v, form_name(c->form), form_name(f->form), f->loc.line, f->loc.col);
  }
  for (int v = 0; v < nst; v++)
    if (rank[v] < 0)
      return sched_csv_error(
          cs, d, (Loc){0, 0},
          "stage %d appears in no row, but stage %d does: the stages are 0 .. N-1", v, nst - 1);
  if (nst % S)
    return sched_csv_error(
        cs, d, (Loc){0, 0},
        "%d stages on %d ranks: every rank runs the same number of stages (S x V "
        "stages, V per rank)",
        nst, S);
  cs->V = nst / S;
  // The loop placement (stage v on rank v mod S) or the V placement (zb-v's: rank r runs stages
  // r and 2S - 1 - r): the two the built-ins lower and the equality matrix proves.
  bool loop = true, vshape = cs->V == 2;
  for (int u = 0; u < nst; u++) loop &= rank[u] == u % S, vshape &= rank[u] == v_rank(S, u);
  for (int v = 0; v < nst && !loop && !vshape; v++) {
    if (rank[v] == v % S) continue;
    return sched_csv_error(
        cs, d, rd->cells[first[v]].loc,
        "stage %d on rank %d: pipec runs stage v on rank v mod S (the loop placement of gpipe, "
        "1f1b, interleaved and zb-h1: here rank %d) or, with 2 stages per rank, rank r runs "
        "stages r and %d - r (the V placement of zb-v); this schedule uses a placement of its own",
        v, rank[v], v % S, 2 * S - 1);
  }
  cs->stage_rank = rank;
  cs->split = ARENA_ARRAY(a, bool, nst);
  for (int v = 0; v < nst; v++) cs->split[v] = bwd[v] >= 0 && rd->cells[bwd[v]].form != 'B';
  // Per rank its actions in order.
  cs->n = ARENA_ARRAY(a, int, S);
  cs->order = ARENA_ARRAY(a, Action *, S);
  cs->loc = ARENA_ARRAY(a, Loc *, S);
  for (int i = 0; i < rd->ncells; i++) cs->n[rd->cells[i].rank]++;
  for (int r = 0; r < S; r++) {
    cs->order[r] = ARENA_ARRAY(a, Action, cs->n[r] + 1);
    cs->loc[r] = ARENA_ARRAY(a, Loc, cs->n[r] + 1);
    cs->n[r] = 0;
  }
  cs->M = 0;
  for (int i = 0; i < rd->ncells; i++) {
    const Cell *c = &rd->cells[i];
    int r = c->rank;
    cs->order[r][cs->n[r]] = c->x;
    cs->loc[r][cs->n[r]++] = c->loc;
    if (c->x.m + 1 > cs->M) cs->M = c->x.m + 1;
  }
  return true;
}

bool sched_csv_load(CsvSchedule *cs, const char *path, Arena *a, Diag *d) {
  *cs = (CsvSchedule){.path = path};
  const char *kind;
  FILE *f = open_regular(path, &kind);
  if (!f && kind)
    return sched_csv_error(cs, d, (Loc){0, 0}, "the schedule is %s, not a regular file", kind);
  if (!f)
    return sched_csv_error(cs, d, (Loc){0, 0}, "cannot read the schedule: %s", strerror(errno));
  char *buf = NULL;
  size_t len = 0, cap = 0, got;
  char chunk[1 << 14];
  while ((got = fread(chunk, 1, sizeof chunk, f)) > 0) {
    if (len + got + 1 > cap) {
      cap = (len + got + 1) * 2;
      char *n = realloc(buf, cap);
      if (!n) {
        free(buf);
        fclose(f);
        return sched_csv_error(cs, d, (Loc){0, 0}, "out of memory reading the schedule");
      }
      buf = n;
    }
    memcpy(buf + len, chunk, got);
    len += got;
  }
  bool rerr = ferror(f);
  fclose(f);
  if (rerr) {
    free(buf);
    return sched_csv_error(cs, d, (Loc){0, 0}, "cannot read the schedule: %s", strerror(errno));
  }
  cs->text = arena_alloc(a, len + 1);
  if (len) memcpy(cs->text, buf, len);
  cs->text[len] = 0;
  cs->len = len;
  free(buf);
  int nl = 1;
  for (size_t i = 0; i < len; i++) nl += cs->text[i] == '\n';
  cs->lines = ARENA_ARRAY(a, size_t, nl + 1);
  cs->nlines = 0;
  cs->lines[cs->nlines++] = 0;
  for (size_t i = 0; i < len; i++)
    if (cs->text[i] == '\n') cs->lines[cs->nlines++] = i + 1; // (after the last: an empty line)
  if (memchr(cs->text, 0, len)) {
    size_t z = (size_t)((char *)memchr(cs->text, 0, len) - cs->text);
    int line = 1;
    for (int l = 0; l < cs->nlines; l++)
      if (cs->lines[l] <= z) line = l + 1;
    return sched_csv_error(cs, d, (Loc){line, (int)(z - cs->lines[line - 1]) + 1},
                           "a NUL byte: the schedule is a text file");
  }
  Reader rd = {cs, d, NULL, 0, 0};
  bool ok = true;
  int rows = 0, blank = 0; // blank: the line of the first row without an action since the last
  cs->line = ARENA_ARRAY(a, int, cs->nlines + 1);
  for (int l = 0; l < cs->nlines && ok; l++) {
    size_t ls = cs->lines[l], le = l + 1 < cs->nlines ? cs->lines[l + 1] - 1 : len;
    bool any = false;
    ok = parse_row(&rd, rows, l + 1, ls, le, &any);
    if (!ok) break;
    if (!any) {
      if (!blank) blank = l + 1;
      continue;
    }
    if (blank) {
      ok = sched_csv_error(cs, d, (Loc){blank, 1},
                           "a row without actions before rank %d's row (line %d): every rank's row "
                           "lists its compute actions",
                           rows, l + 1);
      break;
    }
    cs->line[rows++] = l + 1;
  }
  if (ok && rows == 0)
    ok = sched_csv_error(cs, d, (Loc){0, 0},
                         "no actions: one row per rank of compute actions such as "
                         "0F0,0B0 is expected");
  else if (ok && rows == 1)
    ok = sched_csv_error(cs, d, (Loc){1, 1},
                         "one row, one rank: a pipeline schedule runs on 2 or more ranks (without "
                         "--schedule, one rank runs the one-stage program)");
  cs->S = rows;
  if (ok) ok = check_layout(&rd, a);
  free(rd.cells);
  return ok;
}

// "1F0" / "1I0" for messages.
static const char *act_csv(const CsvSchedule *cs, const Action *x, char *buf, size_t cap) {
  char c = x->kind == ACT_F ? 'F' : x->kind == ACT_W ? 'W' : cs->split[x->v] ? 'I' : 'B';
  snprintf(buf, cap, "%d%c%d", x->v, c, x->m);
  return buf;
}

bool sched_csv_orders(const CsvSchedule *cs, int M, Action ***comp, int **ncomp, Arena *a,
                      Diag *d) {
  int S = cs->S, nv = S * cs->V;
  char t1[48], t2[48];
  for (int r = 0; r < S; r++)
    for (int i = 0; i < cs->n[r]; i++)
      if (cs->order[r][i].m >= M)
        return sched_csv_error(
            cs, d, cs->loc[r][i],
            "%s: microbatch %d out of range: the training runs M = %d microbatches "
            "(0 .. %d; --microbatches or the model's training.microbatches)",
            act_csv(cs, &cs->order[r][i], t1, sizeof t1), cs->order[r][i].m, M, M - 1);
  if (cs->M < M)
    return sched_csv_error(cs, d, (Loc){0, 0},
                           "the schedule runs %d microbatch%s (0 .. %d), the training M = %d "
                           "(--microbatches or the model's training.microbatches): they must agree",
                           cs->M, cs->M == 1 ? "" : "es", cs->M - 1, M);
  // Per (kind F, B, W; stage; m): rank and index of the action, -1: none yet.
  int *at = ARENA_ARRAY(a, int, 3 * (size_t)nv * M);
  for (size_t i = 0; i < 3 * (size_t)nv * M; i++) at[i] = -1;
#define AT(k, v, m) at[((size_t)(k)*nv + (v)) * M + (m)]
  for (int r = 0; r < S; r++)
    for (int i = 0; i < cs->n[r]; i++) {
      const Action *x = &cs->order[r][i];
      int k = action_fbw(x->kind);
      int *p = &AT(k, x->v, x->m);
      if (*p >= 0)
        return sched_csv_error(
            cs, d, cs->loc[r][i], "%s appears twice (first at line %d, column %d)",
            act_csv(cs, x, t1, sizeof t1), cs->loc[r][*p].line, cs->loc[r][*p].col);
      *p = i;
    }
  for (int v = 0; v < nv; v++) {
    int r = v % S;
    for (int k = 0; k < 2 + cs->split[v]; k++)
      for (int m = 0; m < M; m++)
        if (AT(k, v, m) < 0) {
          Action x = {k == 0 ? ACT_F : k == 1 ? ACT_B : ACT_W, v, m, NULL};
          return sched_csv_error(
              cs, d, (Loc){cs->line[r], 1},
              "rank %d's row has no %s: every stage runs %s once per microbatch 0 "
              ".. %d",
              r, act_csv(cs, &x, t1, sizeof t1), cs->split[v] ? "F, I and W" : "F and B", M - 1);
        }
  }
  // Ascending per stage and kind; B (or I) after F, W after I.
  int *last = ARENA_ARRAY(a, int, 3 * (size_t)nv); // per (kind, stage): the index of the last m
  for (int i = 0; i < 3 * nv; i++) last[i] = -1;
  for (int r = 0; r < S; r++)
    for (int i = 0; i < cs->n[r]; i++) {
      const Action *x = &cs->order[r][i];
      int k = action_fbw(x->kind), *l = &last[k * nv + x->v];
      if (*l >= 0 && cs->order[r][*l].m > x->m)
        return sched_csv_error(
            cs, d, cs->loc[r][i],
            "%s after %s (line %d, column %d): a stage runs each of F, B, I and W in "
            "ascending microbatch order (pipec sums the weight gradients in the "
            "one-stage program's order: the same bits)",
            act_csv(cs, x, t1, sizeof t1), act_csv(cs, &cs->order[r][*l], t2, sizeof t2),
            cs->loc[r][*l].line, cs->loc[r][*l].col);
      *l = i;
      if (k == 0) continue;
      int before = AT(k - 1, x->v, x->m);
      if (before > i) {
        const Action *y = &cs->order[r][before];
        return sched_csv_error(cs, d, cs->loc[r][i], "%s before %s (line %d, column %d): %s",
                               act_csv(cs, x, t1, sizeof t1), act_csv(cs, y, t2, sizeof t2),
                               cs->loc[r][before].line, cs->loc[r][before].col,
                               k == 1 ? "a microbatch's backward follows its forward"
                                      : "the weight gradient (W) follows the input gradient (I)");
      }
    }
#undef AT
  *comp = ARENA_ARRAY(a, Action *, S);
  *ncomp = ARENA_ARRAY(a, int, S);
  for (int r = 0; r < S; r++) {
    (*comp)[r] = ARENA_ARRAY(a, Action, cs->n[r] + 1);
    memcpy((*comp)[r], cs->order[r], (size_t)cs->n[r] * sizeof(Action));
    (*ncomp)[r] = cs->n[r];
  }
  return true;
}

bool sched_csv_write(const char *path, int S, Action *const *order, const int *n, const bool *split,
                     Diag *d) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  if (!f) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': %s", path, strerror(errno));
    return false;
  }
  for (int r = 0; r < S; r++) {
    for (int i = 0; i < n[r]; i++) {
      const Action *x = &order[r][i];
      char c = x->kind == ACT_F ? 'F' : x->kind == ACT_W ? 'W' : split[x->v] ? 'I' : 'B';
      fprintf(f, "%s%d%c%d", i ? "," : "", x->v, c, x->m);
    }
    fputc('\n', f);
  }
  fclose(f);
  bool ok = write_file_atomic(path, text, len, d);
  free(text);
  return ok;
}
