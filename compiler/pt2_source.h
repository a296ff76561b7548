// A torch.export archive as the model source: every command that takes MODEL.json takes MODEL.pt2
// (docs/import.md). The archive's graph is imported to pipec's JSON, which the JSON front end then
// parses as if it had been read from a file; messages about the model after the import point at
// the lines of that JSON (what `pipec import` writes).
#ifndef PIPEC_PT2_SOURCE_H
#define PIPEC_PT2_SOURCE_H

#include <stdbool.h>

#include "source.h"

typedef struct Pt2SourceOptions {
  const char *training;    // --training FILE: the training section (NULL: none)
  const char *weights_out; // where to write the archive's weights as safetensors (NULL: nowhere)
  const char *weights_key; // the model's "weights" key naming them (NULL: none)
  char **text;             // where to keep the imported JSON's text (NULL: not kept)
  const char **data_files; // --data-file NAME=PATH: the npy file of input NAME (data.files)
  int ndata_files;         // entries in data_files
} Pt2SourceOptions;

// True for a path the driver reads as an archive (its name ends in ".pt2").
bool pt2_is_archive(const char *path);
// Opens, imports and parses path into s (as source_load does for a JSON model).
bool pt2_source_load(Source *s, Arena *a, const char *path, const Pt2SourceOptions *o, Diag *d);

#endif
