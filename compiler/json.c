// Typed, diagnosed access to the model document's JSON items (see json.h).
#include "json.h"

#include <stdlib.h>
#include <string.h>

Loc json_loc(const JsonIn *j, const cJSON *it) {
  return source_loc(j->src, it);
}

const char *json_shown(Arena *a, const char *s) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++)
    if (*p < 0x20 || *p == 0x7f) {
      char *t = diag_printable(s);
      const char *shown = t ? arena_strdup(a, t) : "?";
      free(t);
      return shown;
    }
  return s;
}

const char *json_type(const cJSON *it) {
  if (cJSON_IsString(it)) return "a string";
  if (cJSON_IsNumber(it)) return "a number";
  if (cJSON_IsBool(it)) return "a boolean";
  if (cJSON_IsNull(it)) return "null";
  if (cJSON_IsArray(it)) return "an array";
  if (cJSON_IsObject(it)) return "an object";
  return "invalid";
}

int json_edit_distance(const char *a, const char *b) {
  int la = (int)strlen(a), lb = (int)strlen(b);
  if (la > 40 || lb > 40) return 99;
  int prev[41], cur[41];
  for (int j = 0; j <= lb; j++) prev[j] = j;
  for (int i = 1; i <= la; i++) {
    cur[0] = i;
    for (int j = 1; j <= lb; j++) {
      int c = prev[j - 1] + (a[i - 1] != b[j - 1]);
      if (prev[j] + 1 < c) c = prev[j] + 1;
      if (cur[j - 1] + 1 < c) c = cur[j - 1] + 1;
      cur[j] = c;
    }
    memcpy(prev, cur, sizeof(int) * (size_t)(lb + 1));
  }
  return prev[lb];
}

const char *json_suggest(Arena *a, const char *word, const char *const *cands, int n) {
  int best = 3;
  const char *pick = NULL;
  for (int i = 0; i < n; i++) {
    int dd = json_edit_distance(word, cands[i]);
    if (dd < best) best = dd, pick = cands[i];
  }
  return pick ? arena_printf(a, " (did you mean '%s'?)", pick) : "";
}

bool json_check_keys(const JsonIn *j, const cJSON *obj, const char *path,
                     const char *const *allowed, int n) {
  if (!cJSON_IsObject(obj)) {
    diag_error(j->d, json_loc(j, obj), "%s: expected an object, got %s", path, json_type(obj));
    return false;
  }
  for (const cJSON *c = obj->child; c; c = c->next) {
    bool ok = false;
    for (int i = 0; i < n && !ok; i++) ok = strcmp(c->string, allowed[i]) == 0;
    if (!ok) {
      diag_error(j->d, json_loc(j, c), "%s: unknown key '%s'%s", path, json_shown(j->a, c->string),
                 json_suggest(j->a, c->string, allowed, n));
      return false;
    }
    for (const cJSON *e = obj->child; e != c; e = e->next)
      if (strcmp(e->string, c->string) == 0) {
        diag_error(j->d, json_loc(j, c), "%s: duplicate key '%s'", path,
                   json_shown(j->a, c->string));
        return false;
      }
  }
  return true;
}

const cJSON *json_get(const cJSON *obj, const char *key) {
  return cJSON_GetObjectItemCaseSensitive(obj, key);
}

bool json_need(const JsonIn *j, const cJSON *obj, const char *path, const char *key,
               const cJSON **out) {
  *out = json_get(obj, key);
  if (*out) return true;
  diag_error(j->d, json_loc(j, obj), "%s: missing required key '%s'", path, key);
  return false;
}

bool json_want_string(const JsonIn *j, const cJSON *it, const char *path, const char **out) {
  if (cJSON_IsString(it)) {
    *out = it->valuestring;
    return true;
  }
  diag_error(j->d, json_loc(j, it), "%s: expected a string, got %s", path, json_type(it));
  return false;
}

bool json_want_array(const JsonIn *j, const cJSON *it, const char *path) {
  if (cJSON_IsArray(it)) return true;
  diag_error(j->d, json_loc(j, it), "%s: expected an array, got %s", path, json_type(it));
  return false;
}

bool json_want_int(const JsonIn *j, const cJSON *it, const char *path, int64_t *out) {
  if (!cJSON_IsNumber(it)) {
    diag_error(j->d, json_loc(j, it), "%s: expected an integer, got %s", path, json_type(it));
    return false;
  }
  if (!source_int(j->src, it, out)) {
    char num[64];
    diag_error(j->d, json_loc(j, it), "%s: expected an integer within +-2^53, got %s", path,
               source_number_str(j->src, it, num, sizeof num));
    return false;
  }
  return true;
}

bool json_want_bool(const JsonIn *j, const cJSON *it, const char *path, bool *out) {
  if (!cJSON_IsBool(it)) {
    diag_error(j->d, json_loc(j, it), "%s: expected true or false, got %s", path, json_type(it));
    return false;
  }
  *out = cJSON_IsTrue(it);
  return true;
}
