// expand_names.c: the model namespace of the expand pass. Names follow one rule set (printable,
// no ':' which is reserved for output indices, braces only as a block's "{i}"), "{i}" is
// substituted by the instance index, every defined name (tensor or node) is reserved once with a
// duplicate reported at its first definition, and references are looked up with an explanation
// for multi-output nodes and a "did you mean" among a bounded set of names.
#include <stdio.h>
#include <string.h>

#include "expand.h"

// A name as defined in the file: printable, no ':' and (outside blocks) no braces.
bool ex_check_name(X *x, const cJSON *it, const char *path, const char *name, bool in_block) {
  size_t n = strlen(name);
  if (n == 0 || n > MAX_NAME) {
    diag_error(x->j.d, json_loc(&x->j, it), "%s: a name must have 1 to %d characters", path,
               MAX_NAME);
    return false;
  }
  for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
    if (*p < 0x20 || *p == 0x7f) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: name contains a control character", path);
      return false;
    }
    if (*p == ':') {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: name '%s' contains ':', which is reserved for output indices", path,
                 json_shown(x->j.a, name)); // (a control byte after it: not checked yet)
      return false;
    }
    if (!in_block && (*p == '{' || *p == '}')) {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: name '%s' contains '%c', which is reserved for blocks ({i})", path,
                 json_shown(x->j.a, name), *p);
      return false;
    }
  }
  return true;
}

// Replaces "{i}" by inst; any other use of braces is an error.
const char *ex_subst(X *x, const cJSON *it, const char *path, const char *name, int inst) {
  char buf[MAX_NAME * 2 + 64];
  size_t o = 0;
  for (const char *p = name; *p;) {
    if (p[0] == '{' && p[1] == 'i' && p[2] == '}') {
      o += (size_t)snprintf(buf + o, sizeof buf - o, "%d", inst);
      p += 3;
    } else if (*p == '{' || *p == '}') {
      diag_error(x->j.d, json_loc(&x->j, it),
                 "%s: '%s' has a '%c' that is not part of '{i}' (the only substitution)", path,
                 json_shown(x->j.a, name), *p);
      return NULL;
    } else {
      if (o + 1 >= sizeof buf) break;
      buf[o++] = *p++;
    }
    if (o >= sizeof buf - 32) {
      diag_error(x->j.d, json_loc(&x->j, it), "%s: name too long", path);
      return NULL;
    }
  }
  buf[o] = 0;
  return arena_strndup(x->j.a, buf, o);
}

static Loc def_loc(X *x, const char *name) {
  Tensor *t = graph_find(x->g, name);
  if (t) return t->loc;
  Node *n = strmap_get(&x->g->node_names, name);
  return n ? n->loc : (Loc){0, 0};
}

// Reserves name in the model namespace; reports a duplicate with the first definition's place.
bool ex_name_free(X *x, const cJSON *it, const char *path, const char *name) {
  if (!graph_find(x->g, name) && !strmap_get(&x->g->node_names, name)) return true;
  Loc first = def_loc(x, name);
  if (first.line)
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: duplicate name '%s' (first defined at line %d, column %d)", path, name,
               first.line, first.col);
  else
    diag_error(x->j.d, json_loc(&x->j, it), "%s: duplicate name '%s'", path, name);
  return false;
}

// Looks a reference up; explains multi-output nodes and suggests near names.
Tensor *ex_resolve(X *x, const cJSON *it, const char *path, const char *ref, const char *what) {
  Tensor *t = graph_find(x->g, ref);
  if (t && t->hidden) {
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: '%s' is saved by '%s' for its backward pass and cannot be used", path, ref,
               t->producer->name);
    return NULL;
  }
  if (t) return t;
  Node *n = strmap_get(&x->g->node_names, ref);
  if (n && node_visible_outputs(n) > 1) {
    int k = node_visible_outputs(n);
    diag_error(x->j.d, json_loc(&x->j, it),
               "%s: '%s' has %d outputs; refer to one of them as '%s:0' .. '%s:%d'", path, ref, k,
               ref, ref, k - 1);
    return NULL;
  }
  // Suggest among a bounded set of names: the closest one overall is too slow for huge models.
  const char *best = NULL;
  int bd = 3;
  for (int i = 0; i < x->g->ntensors && i < 20000; i++) {
    int dd = json_edit_distance(ref, x->g->tensors[i]->name);
    if (dd < bd) bd = dd, best = x->g->tensors[i]->name;
  }
  const char *shown = json_shown(x->j.a, ref);
  if (best)
    diag_error(x->j.d, json_loc(&x->j, it), "%s: undefined %s '%s' (did you mean '%s'?)", path,
               what, shown, best);
  else
    diag_error(x->j.d, json_loc(&x->j, it), "%s: undefined %s '%s'", path, what, shown);
  return NULL;
}
