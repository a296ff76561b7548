// st_copy IN OUT: rewrites the safetensors file IN as OUT with the compiler's writer (st_write),
// for tests/e2e/weights.sh: the header read by the compiler's reader (st_read), each tensor's
// bytes read at its offsets and written under its name in the header's order, without the
// metadata. So the e2e test shows that a file st_write wrote is what the generated program's
// --init and the model's "weights" load (the same losses as from IN). Exit 0, or 1 after one line
// on stderr.
#define _FILE_OFFSET_BITS 64
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../compiler/st_read.h"
#include "../../compiler/st_write.h"

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: st_copy IN OUT\n");
    return 2;
  }
  Arena a;
  arena_init(&a);
  StHeader h;
  char why[1024];
  if (!st_read_header(argv[1], &a, &h, why, sizeof why)) {
    fprintf(stderr, "st_copy: %s\n", why);
    return 1;
  }
  FILE *f = fopen(argv[1], "rb");
  StTensor *t = calloc((size_t)h.n + 1, sizeof *t);
  bool ok = f && t;
  for (int i = 0; ok && i < h.n; i++) {
    const StEntry *e = &h.e[i];
    uint64_t bytes = e->end - e->begin;
    void *data = malloc(bytes + 1);
    ok = data && fseeko(f, (off_t)(h.data_start + e->begin), SEEK_SET) == 0 &&
         fread(data, 1, bytes, f) == bytes;
    t[i] = (StTensor){e->name, e->dtype, e->rank, {0}, data, bytes};
    memcpy(t[i].shape, e->shape, sizeof e->shape);
  }
  if (f) fclose(f);
  if (!ok) fprintf(stderr, "st_copy: cannot read %s\n", argv[1]);
  Diag d;
  diag_init(&d, argv[2], stderr);
  ok = ok && st_write(argv[2], t, h.n, NULL, &d);
  for (int i = 0; t && i < h.n; i++) free((void *)t[i].data);
  free(t);
  arena_free(&a);
  return ok ? 0 : 1;
}
