// The machine-readable diagnostics documents (diag_out.h; the formats are described in
// docs/diagnostics.md), built with cJSON from the records a Diag kept.
//
// JSON: an array with one flat object per message, in the order they were reported:
//   {"kind": "error", "file": "m.json", "line": 17, "column": 19, "path": "nodes[1]",
//    "message": "nodes[1] \"a\": unknown op 'rellu' (did you mean 'relu'?)",
//    "hint": "did you mean 'relu'?", "pass": "expand"}
// line and column are null for a message without a position (column alone for a line without
// one: a .pt2 node's Python line), path and hint null where the
// message has none; column counts bytes, as the text format does.
//
// SARIF: one run of tool pipec; a result per message with its level, text, the pass as its rule,
// the model file as the artifact (a relative URI as given, or a file: URI for an absolute path)
// and the region of the position. SARIF columns cannot count bytes, so the log says
// columnKind "unicodeCodePoints" and startColumn counts the line's characters (the byte column
// is kept in the result's properties). The JSON path is the result's logical location.
//
// Strings in JSON must be UTF-8: any invalid byte in a message, a file name or a source line is
// replaced by U+FFFD.
#include "diag_out.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
  SNIPPET_MAX = 4096, // longest source line copied into a SARIF snippet (bytes)
};

static const char sarif_schema[] =
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json";

bool diag_format_parse(const char *s, DiagFormat *out) {
  static const char *const names[] = {"text", "json", "sarif"};
  for (int i = 0; i < 3; i++)
    if (strcmp(s, names[i]) == 0) {
      *out = (DiagFormat)i;
      return true;
    }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Strings

// Bytes of the valid UTF-8 sequence at p (n bytes left), or 0.
static size_t utf8_len(const unsigned char *p, size_t n) {
  if (*p < 0x80) return 1;
  size_t len = *p >= 0xf0 ? 4 : *p >= 0xe0 ? 3 : 2;
  if (*p < 0xc2 || *p > 0xf4 || len > n) return 0;
  uint32_t c = *p & (len == 4 ? 0x07 : len == 3 ? 0x0f : 0x1f);
  for (size_t i = 1; i < len; i++) {
    if ((p[i] & 0xc0) != 0x80) return 0;
    c = c << 6 | (p[i] & 0x3f);
  }
  if ((len == 3 && c < 0x800) || (len == 4 && c < 0x10000) || c > 0x10ffff ||
      (c >= 0xd800 && c <= 0xdfff))
    return 0;
  return len;
}

// n bytes of s as valid UTF-8 (each invalid byte U+FFFD, a NUL byte too), malloc'd.
static char *clean(const char *s, size_t n) {
  char *o = malloc(3 * n + 1), *q = o;
  if (!o) return NULL;
  const unsigned char *p = (const unsigned char *)s;
  for (size_t i = 0; i < n;) {
    size_t len = p[i] ? utf8_len(p + i, n - i) : 0;
    if (len) {
      memcpy(q, p + i, len);
      q += len, i += len;
    } else {
      memcpy(q, "\xef\xbf\xbd", 3);
      q += 3, i++;
    }
  }
  *q = 0;
  return o;
}

// Adds key: s (as UTF-8; NULL: null) to obj; false when out of memory.
static bool add_str(cJSON *obj, const char *key, const char *s) {
  if (!s) return cJSON_AddNullToObject(obj, key) != NULL;
  char *c = clean(s, strlen(s));
  bool ok = c && cJSON_AddStringToObject(obj, key, c);
  free(c);
  return ok;
}

// The file name as a URI reference: bytes outside RFC 3986's unreserved set and '/' as %XX; an
// absolute path becomes a file: URI.
static char *file_uri(const char *path) {
  size_t n = strlen(path);
  char *o = malloc(3 * n + 8), *q = o;
  if (!o) return NULL;
  if (path[0] == '/') q += sprintf(q, "file://");
  for (const unsigned char *p = (const unsigned char *)path; *p; p++) {
    if ((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
        strchr("-._~/", *p))
      *q++ = (char)*p;
    else
      q += sprintf(q, "%%%02X", *p);
  }
  *q = 0;
  return o;
}

// ---------------------------------------------------------------------------------------------
// What a message says: its JSON path and its suggestion

static bool is_key_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-';
}

char *diag_message_path(const char *msg) {
  // The roots: the model's top-level keys (expand.c's parse_header) and "model" for the document.
  static const char *const roots[] = {"format",  "version",  "name",    "batch", "dims",
                                      "inputs",  "params",   "blocks",  "nodes", "loss",
                                      "outputs", "training", "weights", "model"};
  size_t n = 0;
  while (is_key_char(msg[n])) n++;
  bool root = false;
  for (size_t i = 0; i < sizeof roots / sizeof roots[0] && !root; i++)
    root = strlen(roots[i]) == n && strncmp(msg, roots[i], n) == 0;
  if (!root) return NULL;
  for (;;) {
    if (msg[n] == '.' && is_key_char(msg[n + 1])) {
      n++;
      while (is_key_char(msg[n])) n++;
    } else if (msg[n] == '[' && msg[n + 1] >= '0' && msg[n + 1] <= '9') {
      size_t k = n + 1;
      while (msg[k] >= '0' && msg[k] <= '9') k++;
      if (msg[k] != ']') return NULL;
      n = k + 1;
    } else {
      break;
    }
  }
  // Then ": ", the quoted name of the node or tensor at the path (`nodes[2] "c": ...`) or the
  // block instance it is in (`blocks[0].nodes[1] (instance 1): ...`).
  if (strncmp(msg + n, ": ", 2) != 0 && strncmp(msg + n, " \"", 2) != 0 &&
      strncmp(msg + n, " (", 2) != 0)
    return NULL;
  char *p = malloc(n + 1);
  if (!p) return NULL;
  memcpy(p, msg, n);
  p[n] = 0;
  return p;
}

char *diag_message_hint(const char *msg) {
  static const char open[] = " (did you mean '", close[] = "'?)";
  const char *at = strstr(msg, open);
  if (!at) return NULL;
  while (strstr(at + 1, open)) at = strstr(at + 1, open); // the last one
  size_t n = strlen(at);
  if (n < sizeof open - 1 + sizeof close - 1 || strcmp(at + n - (sizeof close - 1), close) != 0)
    return NULL;
  char *h = malloc(n);
  if (!h) return NULL;
  memcpy(h, at + 2, n - 3); // without " (" and ")"
  h[n - 3] = 0;
  return h;
}

// ---------------------------------------------------------------------------------------------
// The source line of a record

typedef struct Line {
  const char *text; // the line (NULL: no source, or the position is not in it)
  size_t len;       // its bytes, without the line break
} Line;

// The record's line at its position (kept with the record: its file's text when it was reported).
static Line line_of(const DiagRecord *r) {
  if (!r->line || r->loc.col < 1 || (size_t)r->loc.col - 1 > r->line_len) return (Line){NULL, 0};
  return (Line){r->line, r->line_len};
}

// The column of byte column col in characters (UTF-8 lead bytes before it, plus one).
static int char_column(Line l, int col) {
  if (!l.text) return col;
  int c = 1;
  for (size_t i = 0; i < (size_t)col - 1 && i < l.len; i++)
    if (((unsigned char)l.text[i] & 0xc0) != 0x80) c++;
  return c;
}

// ---------------------------------------------------------------------------------------------
// The documents

static cJSON *json_document(const Diag *d) {
  cJSON *arr = cJSON_CreateArray();
  for (int i = 0; arr && i < d->nrecs; i++) {
    const DiagRecord *r = &d->recs[i];
    cJSON *o = cJSON_CreateObject();
    char *path = diag_message_path(r->message), *hint = diag_message_hint(r->message);
    bool at = r->loc.line > 0;
    bool ok = o && cJSON_AddItemToArray(arr, o) && add_str(o, "kind", r->kind) &&
              add_str(o, "file", r->file ? r->file : d->file) &&
              (at ? cJSON_AddNumberToObject(o, "line", r->loc.line) != NULL
                  : cJSON_AddNullToObject(o, "line") != NULL) &&
              (at && r->loc.col > 0 ? cJSON_AddNumberToObject(o, "column", r->loc.col) != NULL
                                    : cJSON_AddNullToObject(o, "column") != NULL) &&
              add_str(o, "path", path) && add_str(o, "message", r->message) &&
              add_str(o, "hint", hint) && add_str(o, "pass", r->pass);
    free(path);
    free(hint);
    if (!ok) {
      cJSON_Delete(arr);
      return NULL;
    }
  }
  return arr;
}

// What each pass checks (the rules of the SARIF log; the pass names are the driver's).
static const char *rule_text(const char *pass) {
  static const char *const t[][2] = {
      {"parse", "The model file: readable, a JSON document (syntax, nesting, duplicate keys)."},
      {"expand", "The model's structure: keys, names, dims, inputs, params, blocks, nodes, ops "
                 "and their attributes, -D overrides, the weights file against the params."},
      {"shape", "Shapes and types of every node; the loss is a scalar; unused parameters."},
      {"training", "The training section and --set overrides: batch, optimizer, schedule, data."},
      {"autodiff", "The backward pass of the model."},
      {"partition", "The cut into pipeline stages: --stages, --split, stage hints, --mem-cap."},
      {"comm", "The channels between stages and the exchange of shared parameters."},
      {"schedule", "The pipeline schedule: --schedule, --virtual, each rank's action list."},
      {"memplan", "The memory plan and the target: dtypes the target computes in, --mem-cap."},
      {"codegen", "Writing and building the generated programs."},
  };
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(pass, t[i][0]) == 0) return t[i][1];
  return "A check of pipec.";
}

static cJSON *add_obj(cJSON *parent, const char *key) {
  return parent ? cJSON_AddObjectToObject(parent, key) : NULL;
}

// One SARIF result; false when out of memory.
static bool sarif_result(const Diag *d, const DiagRecord *r, int rule, cJSON *results) {
  cJSON *res = cJSON_CreateObject();
  if (!res || !cJSON_AddItemToArray(results, res)) {
    cJSON_Delete(res);
    return false;
  }
  bool ok = true;
  if (r->pass)
    ok = add_str(res, "ruleId", r->pass) && cJSON_AddNumberToObject(res, "ruleIndex", rule);
  ok = ok && add_str(res, "level", r->kind);
  cJSON *msg = add_obj(res, "message");
  ok = ok && msg && add_str(msg, "text", r->message);
  char *path = diag_message_path(r->message), *hint = diag_message_hint(r->message);
  if (ok && strcmp(r->kind, "note") != 0) { // a note is about the run, not a place
    cJSON *locs = cJSON_AddArrayToObject(res, "locations"), *loc = cJSON_CreateObject();
    ok = locs && loc && cJSON_AddItemToArray(locs, loc);
    if (!ok) cJSON_Delete(loc);
    cJSON *phys = ok ? add_obj(loc, "physicalLocation") : NULL;
    cJSON *art = add_obj(phys, "artifactLocation");
    const char *file = r->file ? r->file : d->file;
    char *uri = file_uri(file);
    ok = ok && art && uri && add_str(art, "uri", uri) &&
         (file[0] == '/' || add_str(art, "uriBaseId", "%SRCROOT%"));
    free(uri);
    if (ok && r->loc.line > 0) {
      Line l = line_of(r);
      cJSON *reg = add_obj(phys, "region");
      ok = reg && cJSON_AddNumberToObject(reg, "startLine", r->loc.line) &&
           (r->loc.col < 1 || // a line without a column (a .pt2 node's Python line)
            cJSON_AddNumberToObject(reg, "startColumn", char_column(l, r->loc.col)));
      if (ok && l.text && l.len <= SNIPPET_MAX) {
        cJSON *snip = add_obj(reg, "snippet");
        char *c = clean(l.text, l.len);
        ok = snip && c && cJSON_AddStringToObject(snip, "text", c);
        free(c);
      }
    }
    if (ok && path) {
      cJSON *logs = cJSON_AddArrayToObject(loc, "logicalLocations"), *lg = cJSON_CreateObject();
      ok = logs && lg && cJSON_AddItemToArray(logs, lg);
      if (!ok) cJSON_Delete(lg);
      ok = ok && add_str(lg, "fullyQualifiedName", path);
    }
  }
  if (ok && (path || hint || (r->loc.line > 0 && r->loc.col > 0))) {
    cJSON *props = add_obj(res, "properties");
    ok = props != NULL;
    if (ok && path) ok = add_str(props, "jsonPath", path);
    if (ok && hint) ok = add_str(props, "hint", hint);
    if (ok && r->loc.line > 0 && r->loc.col > 0)
      ok = cJSON_AddNumberToObject(props, "byteColumn", r->loc.col) != NULL;
  }
  free(path);
  free(hint);
  return ok;
}

static cJSON *sarif_document(const Diag *d, const char *version) {
  cJSON *log = cJSON_CreateObject();
  bool ok = log && add_str(log, "$schema", sarif_schema) && add_str(log, "version", "2.1.0");
  cJSON *runs = ok ? cJSON_AddArrayToObject(log, "runs") : NULL, *run = cJSON_CreateObject();
  ok = runs && run && cJSON_AddItemToArray(runs, run);
  if (!ok) cJSON_Delete(run);
  cJSON *driver = add_obj(add_obj(ok ? run : NULL, "tool"), "driver");
  ok = ok && driver && add_str(driver, "name", "pipec") && add_str(driver, "version", version) &&
       add_str(driver, "semanticVersion", version);
  cJSON *rules = ok ? cJSON_AddArrayToObject(driver, "rules") : NULL;
  ok = ok && rules && add_str(run, "columnKind", "unicodeCodePoints");
  cJSON *results = ok ? cJSON_AddArrayToObject(run, "results") : NULL;
  ok = ok && results;
  // The rules: each pass that reported something, in the order of its first result.
  const char **ids = calloc((size_t)d->nrecs + 1, sizeof *ids);
  int nids = 0;
  ok = ok && ids;
  for (int i = 0; ok && i < d->nrecs; i++) {
    const DiagRecord *r = &d->recs[i];
    int k = -1;
    for (int j = 0; r->pass && j < nids && k < 0; j++)
      if (strcmp(ids[j], r->pass) == 0) k = j;
    if (r->pass && k < 0) {
      cJSON *rule = cJSON_CreateObject();
      ok = rule && cJSON_AddItemToArray(rules, rule);
      if (!ok) cJSON_Delete(rule);
      ok = ok && add_str(rule, "id", r->pass);
      cJSON *sd = ok ? add_obj(rule, "shortDescription") : NULL;
      ok = ok && sd && add_str(sd, "text", rule_text(r->pass));
      ids[k = nids++] = r->pass;
    }
    ok = ok && sarif_result(d, r, k, results);
  }
  free(ids);
  if (!ok) {
    cJSON_Delete(log);
    return NULL;
  }
  return log;
}

bool diag_write(Diag *d, const char *version) {
  if (d->format == DIAG_TEXT) return true;
  cJSON *doc = d->format == DIAG_JSON ? json_document(d) : sarif_document(d, version);
  char *s = !doc ? NULL : d->format == DIAG_JSON ? cJSON_PrintUnformatted(doc) : cJSON_Print(doc);
  cJSON_Delete(doc);
  if (s) {
    fputs(s, d->out);
    fputc('\n', d->out);
    fflush(d->out);
    free(s);
  } else { // out of memory: the messages as text rather than nothing
    for (int i = 0; i < d->nrecs; i++) {
      const DiagRecord *r = &d->recs[i];
      const char *file = r->file ? r->file : d->file;
      if (r->loc.line > 0)
        fprintf(d->out, "%s:%d:%d: %s: %s\n", file, r->loc.line, r->loc.col, r->kind, r->message);
      else
        fprintf(d->out, "%s: %s: %s\n", file, r->kind, r->message);
    }
  }
  diag_free(d);
  return s != NULL;
}
