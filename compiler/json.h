// Reading the model document: typed access to cJSON items with diagnostics that name the JSON
// path and the item's line:col ("nodes[3].inputs: expected an array, got a string"), strict
// key sets with "did you mean" suggestions. Used by the expand pass and the training section.
#ifndef PIPEC_JSON_H
#define PIPEC_JSON_H

#include "source.h"

typedef struct JsonIn {
  const Source *src; // the document (positions, exact number literals)
  Diag *d;           // where errors go
  Arena *a;          // for message fragments
} JsonIn;

Loc json_loc(const JsonIn *j, const cJSON *it);
// s as a message quotes it: s itself when it holds no control byte, else a copy (in a) with each
// one escaped as diag_printable writes it ('\n', '\x1b'). A JSON escape ("\n", "\u001b") puts
// such a byte into a key or a string, and a message must stay one line.
const char *json_shown(Arena *a, const char *s);
// "a string", "a number", ... for messages.
const char *json_type(const cJSON *it);
// Levenshtein distance (99 for words over 40 bytes).
int json_edit_distance(const char *a, const char *b);
// " (did you mean 'x'?)" for the closest candidate within distance 2, else "".
const char *json_suggest(Arena *a, const char *word, const char *const *cands, int n);
// obj is an object whose keys are all in allowed, each once.
bool json_check_keys(const JsonIn *j, const cJSON *obj, const char *path,
                     const char *const *allowed, int n);
const cJSON *json_get(const cJSON *obj, const char *key);
// A required key: reports "PATH: missing required key 'KEY'" when absent.
bool json_need(const JsonIn *j, const cJSON *obj, const char *path, const char *key,
               const cJSON **out);
bool json_want_string(const JsonIn *j, const cJSON *it, const char *path, const char **out);
bool json_want_array(const JsonIn *j, const cJSON *it, const char *path);
// An integer within +-2^53, read exactly from its literal (source_int).
bool json_want_int(const JsonIn *j, const cJSON *it, const char *path, int64_t *out);
bool json_want_bool(const JsonIn *j, const cJSON *it, const char *path, bool *out);

#endif
