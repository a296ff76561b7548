// st_write.h: the compiler's safetensors writer (pipec import --weights: the weights of a
// torch.export archive as the compiled program's initial parameters, docs/model-format.md
// "weights"). The file is what the safetensors package writes and what the generated program's
// --init and the model's "weights" read (runtime/safetensors.c): an 8-byte little-endian header
// length N, N bytes of JSON ({"__metadata__": {...}, "NAME": {"dtype": "F32", "shape": [...],
// "data_offsets": [begin, end]}, ...}, printed by cJSON, padded with spaces to a multiple of 8
// bytes), then the tensors' bytes packed in the order given. Tied tensors are two entries with
// two names and two copies of the bytes, as the program's --save writes them, so that PyTorch's
// load_state_dict(strict=True) finds both names.
#ifndef PIPEC_ST_WRITE_H
#define PIPEC_ST_WRITE_H

#include <stdbool.h>
#include <stdint.h>

#include "../ir/diag.h"

enum { ST_MAX_RANK = 8 }; // most dimensions of a tensor (the runtime's reader reads 8)

typedef struct StTensor {
  const char *name;           // its name in the file (not "__metadata__", unique, no NUL)
  const char *dtype;          // "F32", "I64", "I32", "BF16", "F16", "F64", "U8" or "BOOL"
  int rank;                   // dimensions, 0 (a scalar) to ST_MAX_RANK
  int64_t shape[ST_MAX_RANK]; // sizes, each >= 0
  const void *data;           // its bytes, little-endian, row-major (NULL only when bytes is 0)
  uint64_t bytes;             // exactly numel * the dtype's size
} StTensor;

// Bytes per element of a dtype st_write writes; 0 for any other name.
int st_dtype_size(const char *dtype);

// Writes the n tensors t (in that order) and, unless metadata_json is NULL, "__metadata__": a
// JSON object of string values (as the format requires) to path atomically: PATH.tmp.PID,
// flushed and fsync'ed, renamed over path (a reader sees the old file or the new one); nothing
// is left behind on failure. Checks first: every dtype known, rank 0..8, sizes >= 0, bytes equal
// to numel * dtype size (no overflow), names non-empty, unique and not "__metadata__", the
// metadata an object of strings. False after reporting one line through d ("cannot write 'PATH':
// why", or the tensor at fault).
bool st_write(const char *path, const StTensor *t, int n, const char *metadata_json, Diag *d);

#endif
