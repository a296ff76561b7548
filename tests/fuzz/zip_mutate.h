// ZIP archives for fuzz_pt2 (tests/fuzz/README.md): an archive read into memory as a list of
// entries (name, bytes, how it is stored), written back into a buffer with libzip (also names
// libzip refuses to add: a second entry of one name, an empty name), and mutations of a ZIP's
// binary headers in place: a field of a local header, of the central directory or of its end
// record set to a boundary value, or a byte of an entry's name changed.
#ifndef PIPEC_FUZZ_ZIP_MUTATE_H
#define PIPEC_FUZZ_ZIP_MUTATE_H

#include <stdbool.h>

#include "mutate.h"

typedef struct ZEntry {
  char *name;   // the entry's name (malloc'd)
  Buf data;     // its bytes, uncompressed
  int method;   // ZIP_CM_STORE (torch writes stored entries), ZIP_CM_DEFLATE, ...
  bool encrypt; // written encrypted (AES-128, a password pt2 does not have)
} ZEntry;

typedef struct ZArchive {
  ZEntry *e; // in file order
  int n;     // count
  int cap;   // allocated
} ZArchive;

// Reads every entry of the ZIP at path; false (with a message on stderr) when it does not open.
bool zarchive_read(ZArchive *z, const char *path);
// A deep copy of src into dst (dst's old entries freed).
void zarchive_copy(ZArchive *dst, const ZArchive *src);
// Appends an entry (name and data copied).
ZEntry *zarchive_add(ZArchive *z, const char *name, const void *data, size_t n);
void zarchive_remove(ZArchive *z, int i);
// The index of the entry named name, or -1.
int zarchive_find(const ZArchive *z, const char *name);
void zarchive_free(ZArchive *z);
// The archive's bytes into out; false (why in err) when libzip refuses it.
bool zarchive_write(const ZArchive *z, Buf *out, char *err, size_t cap);

// One header field (or name byte) of the ZIP in b changed; false when b holds no header.
bool zip_field_mutation(Rng *r, Buf *b);

#endif
