// sched_csv.h: custom pipeline schedules in torch.distributed.pipelining's CSV form
// ("compute_only": one row per rank, each cell a compute action like 0F0, 1I0, 1W0, 0B0), read
// for `--schedule FILE.csv` and written by `pipec plan --export-csv FILE` (docs/pipeline.md,
// "Custom schedules"). The rows are the ranks' compute orders; sched_lower (compiler/schedules.c)
// lowers them like a built-in's.
#ifndef PIPEC_SCHED_CSV_H
#define PIPEC_SCHED_CSV_H

#include "pipeline.h"

// A schedule read from a CSV file.
typedef struct CsvSchedule {
  const char *path; // the file as named on the command line
  int S;            // ranks: the rows
  int V;            // stages per rank (the stages are 0 .. S V - 1, stage v on rank v mod S)
  int M;            // microbatches it runs: 1 + the largest microbatch in it
  Action **order;   // per rank its compute actions in order (F, B, W; B is I on a split stage)
  Loc **loc;        // per rank per action: the position of its cell
  int *n;           // per rank: its actions
  int *line;        // per rank: the line of its row
  bool *split;      // per stage: its backward is I then W (else B, the whole backward)
  int *stage_rank;  // per stage: the rank whose row names it (today always v mod S)
  char *text;       // the file's bytes, NUL-terminated (the excerpts of its messages)
  size_t len;       // bytes in text
  size_t *lines;    // byte offset of each line's start
  int nlines;       // entries in lines
} CsvSchedule;

// Reads path into cs: the cells (whitespace around a cell and empty cells are ignored, a cell may
// be quoted as in RFC 4180, trailing blank lines are ignored; `(A;B)OVERLAP_F_B` is A then B), the
// stages' ranks (each on one rank, the loop placement), each stage's backward form (B, or I and
// W). False after reporting through d as `FILE:LINE:COL: error: ...`.
bool sched_csv_load(CsvSchedule *cs, const char *path, Arena *a, Diag *d);

// Checks cs against the training's M: every stage runs F, and B or I and W, exactly once per
// microbatch 0..M-1, each kind in ascending microbatch order, B or I after F and W after I. Then
// writes each rank's compute order to comp[r] (ncomp[r] actions, arena a) as sched_lower takes
// it. False after reporting through d.
bool sched_csv_orders(const CsvSchedule *cs, int M, Action ***comp, int **ncomp, Arena *a, Diag *d);

// Writes rank r's order[r] (n[r] actions) as row r of a CSV file at path (atomically), each
// action as `<stage><F|B|I|W><microbatch>`: B as I on a stage with split[v]. False after
// reporting through d.
// An error in the schedule's file: through d as FILE:LINE:COL (FILE: without a position), the
// file's own line and a caret under it. Returns false.
bool sched_csv_error(const CsvSchedule *cs, Diag *d, Loc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

bool sched_csv_write(const char *path, int S, Action *const *order, const int *n, const bool *split,
                     Diag *d);

#endif
