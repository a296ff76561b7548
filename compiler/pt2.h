// torch.export archives (.pt2, written by torch.export.save): a ZIP of stored entries read with
// libzip, the graph (<name>/models/model.json) and the weights' table
// (<name>/data/weights/model_weights_config.json) parsed with cJSON, each weight's raw
// little-endian bytes read on demand with its size checked against its shape and dtype
// (compiler/pt2.c; issue 29). Nothing of the archive is executed: pickled weights are refused.
//
// Every failure is one line through the diag machinery, "FILE: error: MESSAGE", MESSAGE naming the
// entry (or the weight's fully qualified name) it is about: not a regular file, not a ZIP, a
// truncated ZIP, an entry name with a ".." component, an absolute path or a control character, two
// entries of one name, an entry declaring more bytes than the archive holds, a byteorder other than
// "little", a missing entry, JSON that does not parse, a schema_version of another major than
// PT2_SCHEMA_MAJORS, a weight whose name holds a control character, a weight of an unknown dtype,
// symbolic or negative sizes, strides that are not contiguous, a storage offset, or bytes that do
// not match its shape.
#ifndef PIPEC_PT2_H
#define PIPEC_PT2_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../ir/arena.h"
#include "../ir/diag.h"

// The schema majors of model.json read here (torch/_export/serde/schema.py's SCHEMA_VERSION:
// 8.20 in PyTorch 2.15), as the message that refuses another one names them.
#define PT2_SCHEMA_MAJORS "8"
// Most dimensions of a weight.
enum { PT2_MAX_RANK = 8 };
// Largest JSON entry read (model.json, the weights' config).
#define PT2_MAX_JSON ((uint64_t)256 << 20)

typedef struct Pt2Weight {
  const char *fqn;        // fully qualified name: "l.weight"
  const char *entry;      // its archive entry: "m/data/weights/weight_0" (tied weights share one)
  int dtype;              // the schema's ScalarType code (7: float32)
  const char *dtype_name; // "f32", "bf16", "i64", ...
  int elem;               // bytes per element
  int rank;               // dimensions
  int64_t sizes[PT2_MAX_RANK];
  uint64_t numel; // elements
  uint64_t bytes; // numel * elem: exactly the entry's size
  bool is_param;  // a parameter (is_param), else a buffer
} Pt2Weight;

typedef struct Pt2 {
  const char *path;    // as opened
  struct zip *zip;     // libzip's open archive (pt2_close closes it)
  uint64_t file_bytes; // the archive's size
  const char *prefix;  // the archive's directory, with its '/': "m/"
  int schema_major;    // model.json's schema_version
  int schema_minor;
  cJSON *model;          // model.json (pt2_close frees it)
  cJSON *weights_config; // model_weights_config.json (pt2_close frees it)
  int nweights;          // entries of weights, in the config's order
  Pt2Weight *weights;    // (arena)
  cJSON *constants_config; // model_constants_config.json, NULL when absent (pt2_close frees it)
  int nconstants;          // entries of constants (buffers, constants), in the config's order
  Pt2Weight *constants;    // (arena)
} Pt2;

// Opens the archive at path: checks every entry's name and size, locates <name>/models/model.json
// and reads it, checks its schema_version, reads the weights' config and checks every weight
// (its entry exists and holds exactly numel * elem bytes; dtype, sizes, contiguous strides).
// False after reporting one error through d; p is then closed (pt2_close is harmless again).
bool pt2_open(Pt2 *p, const char *path, Arena *a, Diag *d);
// The weight of fully qualified name fqn; NULL when there is none.
const Pt2Weight *pt2_weight(const Pt2 *p, const char *fqn);
// The buffer or constant of name fqn ("rope_cos"); NULL when there is none.
const Pt2Weight *pt2_constant(const Pt2 *p, const char *fqn);
// Reads w's bytes (w->bytes of them) into buf; false after reporting a short read or a CRC error.
bool pt2_read_weight(const Pt2 *p, const Pt2Weight *w, void *buf, Diag *d);
void pt2_close(Pt2 *p);

#endif
