// fuzz_pt2: the torch.export archive reader under mutation (tests/fuzz/README.md). Seeds: the
// import fixtures (tests/import/fixtures/*.pt2). A mutant is either the fixture's bytes with ZIP
// header fields and bytes changed (raw: mostly libzip's own checks), or the fixture rebuilt with
// libzip with one or two entries changed (structured: model.json or the weights' config mutated
// as JSON or field by field, a weight cut short or grown, an entry renamed ('..', an absolute
// name, a control byte), removed, duplicated, compressed or encrypted, the archive's folder
// moved, the schema major or the byteorder changed), now and then with raw changes on top. Each
// is written to one temporary file and run through pt2_open, then pt2_read_weight of every
// weight, then the graph importer (one marked call site, for when it exists).
//
// Asserted: no crash, hang or leak; a refused archive is exactly one "m.pt2: error: ..." line;
// an opened one reported nothing, its table is consistent (sizes, bytes, entries), and when the
// archive was rebuilt by libzip untouched by raw changes every weight reads without error.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zip.h>

#include "../../compiler/files.h"
#include "../../compiler/pt2.h"
#include "../../compiler/pt2_import.h"
#include "harness.h"
#include "pt2_mutate.h"

enum { ST_OPEN, ST_READ, ST_GRAPH, ST_ACCEPTED, NSTAGES };
static const char *const STAGES[] = {"open", "read", "graph", "accepted"};
_Static_assert(sizeof STAGES / sizeof STAGES[0] == NSTAGES, "a name per stage");

enum { MAX_READ = 64 << 20 };              // weights larger than this are not read
static char tmp_dir[4096];                 // this run's directory
static char tmp_path[sizeof tmp_dir + 16]; // the mutant, rewritten for each

// ---- the graph stage

// The graph importer's stage (compiler/pt2_import.h): its refusals are checked as pt2_open's (one
// line each), and an archive it imports counts as "accepted".
static bool import_graph(const Pt2 *p, Arena *a, Diag *d) {
  Pt2ImportOptions opts = {.name = "fuzz"};
  cJSON *m = NULL;
  bool ok = pt2_import(p, &opts, &m, a, d);
  cJSON_Delete(m);
  return ok;
}

// ---- running a mutant

static void write_mutant(const Buf *b) {
  FILE *f = fopen(tmp_path, "wb");
  if (!f || fwrite(b->p, 1, b->n, f) != b->n || fclose(f) != 0) {
    fprintf(stderr, "fuzz_pt2: cannot write %s\n", tmp_path);
    exit(2);
  }
}

// The opened archive's table against what pt2.h promises; false with why.
static bool consistent(const Pt2 *p, char *why, size_t cap) {
  size_t pl = p->prefix ? strlen(p->prefix) : 0;
  if (!pl || p->prefix[pl - 1] != '/' || !p->model || !p->weights_config || p->schema_major != 8) {
    snprintf(why, cap, "opened with prefix '%s', model %p, config %p, schema %d",
             p->prefix ? p->prefix : "(null)", (void *)p->model, (void *)p->weights_config,
             p->schema_major);
    return false;
  }
  for (int i = 0; i < p->nweights; i++) {
    const Pt2Weight *w = &p->weights[i];
    uint64_t numel = 1;
    for (int k = 0; k < w->rank; k++) numel *= (uint64_t)w->sizes[k];
    if (!w->fqn || !w->entry || w->elem <= 0 || w->rank < 0 || w->rank > PT2_MAX_RANK ||
        numel != w->numel || w->bytes != w->numel * (uint64_t)w->elem ||
        strncmp(w->entry, p->prefix, pl)) {
      snprintf(why, cap,
               "weight %d '%s' inconsistent: entry '%s', elem %d, rank %d, numel %llu, "
               "bytes %llu",
               i, w->fqn ? w->fqn : "(null)", w->entry ? w->entry : "(null)", w->elem, w->rank,
               (unsigned long long)w->numel, (unsigned long long)w->bytes);
      return false;
    }
  }
  return true;
}

// Reads every weight; ST_READ when one failed (allowed unless the archive is intact).
static int read_weights(const Pt2 *p, Diag *d, FuzzCase *c) {
  for (int i = 0; i < p->nweights; i++) {
    const Pt2Weight *w = &p->weights[i];
    if (w->bytes > MAX_READ) continue;
    void *buf = malloc(w->bytes ? w->bytes : 1);
    if (!buf) exit(2);
    bool ok = pt2_read_weight(p, w, buf, d);
    free(buf);
    if (ok) continue;
    if (c->knob & KNOB_INTACT)
      snprintf(c->why, sizeof c->why, "weight '%s' of an archive libzip wrote did not read",
               w->fqn);
    return ST_READ;
  }
  return ST_GRAPH;
}

static int run(FuzzCase *c) {
  write_mutant(&c->input);
  Arena a;
  arena_init(&a);
  char *out = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&out, &len);
  if (!f) exit(2);
  Diag d;
  diag_init(&d, "m.pt2", f);
  Pt2 p;
  int stage = ST_OPEN;
  if (pt2_open(&p, tmp_path, &a, &d)) {
    stage = consistent(&p, c->why, sizeof c->why) ? read_weights(&p, &d, c) : ST_READ;
    if (stage == ST_GRAPH && import_graph(&p, &a, &d) && !d.errors) stage = ST_ACCEPTED;
  }
  pt2_close(&p);
  fclose(f);
  if (c->verbose) fprintf(stderr, "%s", out);
  if (!c->why[0])
    fuzz_check_diag(out, "m.pt2", d.errors, stage != ST_ACCEPTED,
                    stage != ST_GRAPH, // the importer reports every unsupported node at once
                    c->why, sizeof c->why);
  free(out);
  arena_free(&a);
  return stage;
}

int main(int argc, char **argv) {
  const char *tmp = getenv("TMPDIR");
  snprintf(tmp_dir, sizeof tmp_dir, "%s/fuzz_pt2.XXXXXX", tmp && *tmp ? tmp : "/tmp");
  if (!mkdtemp(tmp_dir)) {
    perror("fuzz_pt2: mkdtemp");
    return 2;
  }
  snprintf(tmp_path, sizeof tmp_path, "%s/m.pt2", tmp_dir);
  const FuzzTarget t = {.name = "fuzz_pt2",
                        .ext = ".pt2",
                        .stages = STAGES,
                        .nstages = NSTAGES,
                        .load = pt2_seed_load,
                        .unload = pt2_seed_unload,
                        .mutate = pt2_mutate,
                        .run = run};
  int rc = fuzz_main(argc, argv, &t);
  remove_tree(tmp_dir);
  return rc;
}
