// Structural JSON mutations (mutate.h): one value of the tree, picked uniformly among all values
// below the root, deleted, duplicated, replaced or edited. Numbers are written as raw literals
// (cJSON_CreateRaw) so that a mutant can hold what a double cannot: 2^53 + 1, 1e999, -0.
// Replacement keeps the member's key; a duplicate in an object is a duplicate key.
#include "mutate.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const NUMBERS[] = {
    "0",
    "-0",
    "1",
    "-1",
    "2",
    "3",
    "7",
    "0.5",
    "-0.5",
    "1e3",
    "1.0",
    "65536",
    "2147483647",
    "2147483648",
    "4294967296",
    "9007199254740992",
    "9007199254740993",
    "9223372036854775807",
    "18446744073709551616",
    "1e308",
    "1e999",
    "-1e999",
    "1e-400",
    "123456789012345678901234567890",
};

static const char *const STRINGS[] = {
    "",       "x",         "..",       "/abs",     "a\nb", "\xc3\xa9", "B",   "f32", "i32",
    "bf16",   "zeros",     "linear",   "relu",     "a.b",  "0",        "-1",  "NaN", "1e999",
    "a/../b", "tab\there", "\x1b[31m", "weight_0", "loss", "h.0",      "B*2", "-B",  "(B",
};

#define COUNT(a) (sizeof(a) / sizeof((a)[0]))

// ---- the tree

static int count_nodes(const cJSON *x) {
  int n = 0;
  for (const cJSON *c = x->child; c; c = c->next) n += 1 + count_nodes(c);
  return n;
}

// The k-th value below x in pre-order (k counts down), with its parent.
static cJSON *nth_node(cJSON *x, int *k, cJSON **parent) {
  for (cJSON *c = x->child; c; c = c->next) {
    if ((*k)-- == 0) {
      *parent = x;
      return c;
    }
    cJSON *found = nth_node(c, k, parent);
    if (found) return found;
  }
  return NULL;
}

static cJSON *pick(Rng *r, cJSON *root, cJSON **parent) {
  int n = count_nodes(root);
  if (!n) return NULL;
  int k = (int)rng_below(r, (uint64_t)n);
  return nth_node(root, &k, parent);
}

// The member key of item set to key (NULL: none); cJSON frees keys with free (default hooks).
static void set_key(cJSON *item, const char *key) {
  char *copy = key ? strdup(key) : NULL; // before the old one is freed: key may be it
  if (!(item->type & cJSON_StringIsConst)) free(item->string);
  item->type &= ~cJSON_StringIsConst;
  item->string = copy;
}

// The lists are changed here through their next links alone, then every prev link of the list set
// again: cJSON keeps the first element's prev at the last one, and its own list functions (1.7.15)
// lose elements after an insertion at index 0 (cJSON_InsertItemInArray then refuses).
static void relink(cJSON *parent) {
  cJSON *last = NULL;
  for (cJSON *c = parent->child; c; c = c->next) c->prev = last, last = c;
  if (parent->child) parent->child->prev = last;
}

// The link that points at item: parent->child or its predecessor's next.
static cJSON **link_to(cJSON *parent, cJSON *item) {
  cJSON **l = &parent->child;
  while (*l != item) l = &(*l)->next;
  return l;
}

static void detach_delete(cJSON *parent, cJSON *item) {
  *link_to(parent, item) = item->next;
  item->next = item->prev = NULL;
  cJSON_Delete(item);
  relink(parent);
}

// x put in item's place (item freed); x takes item's key.
static void replace(cJSON *parent, cJSON *item, cJSON *x) {
  if (!x) return;
  set_key(x, item->string);
  *link_to(parent, item) = x;
  x->next = item->next;
  item->next = item->prev = NULL;
  cJSON_Delete(item);
  relink(parent);
}

// x after item (in an object too: the members are one list).
static void insert_after(cJSON *parent, cJSON *item, cJSON *x) {
  if (!x) return;
  x->next = item->next;
  item->next = x;
  relink(parent);
}

// ---- the values put in

static cJSON *interesting_value(Rng *r) {
  switch (rng_below(r, 6)) {
  case 0:
  case 1:
    return cJSON_CreateRaw(NUMBERS[rng_below(r, COUNT(NUMBERS))]);
  case 2:
    return cJSON_CreateString(STRINGS[rng_below(r, COUNT(STRINGS))]);
  case 3:
    return rng_chance(r, 50) ? cJSON_CreateBool(rng_chance(r, 50)) : cJSON_CreateNull();
  case 4:
    return cJSON_CreateArray();
  default:
    return cJSON_CreateObject();
  }
}

// n + 1, n - 1, 2n, -n or n + 0.5 of a number item, as a literal.
static cJSON *number_tweak(Rng *r, const cJSON *item) {
  double v = item->valuedouble;
  char s[64];
  switch (rng_below(r, 5)) {
  case 0:
    snprintf(s, sizeof s, "%.17g", v + 1);
    break;
  case 1:
    snprintf(s, sizeof s, "%.17g", v - 1);
    break;
  case 2:
    snprintf(s, sizeof s, "%.17g", v * 2);
    break;
  case 3:
    snprintf(s, sizeof s, "%.17g", -v);
    break;
  default:
    snprintf(s, sizeof s, "%.17g", v + 0.5);
    break;
  }
  if (strstr(s, "inf") || strstr(s, "nan")) snprintf(s, sizeof s, "1e999");
  return cJSON_CreateRaw(s);
}

// A string value or key found elsewhere in the tree (NULL: none found in a few tries).
static const char *some_string(Rng *r, cJSON *root) {
  for (int t = 0; t < 8; t++) {
    cJSON *parent, *x = pick(r, root, &parent);
    if (!x) return NULL;
    if (cJSON_IsString(x) && rng_chance(r, 60)) return x->valuestring;
    if (x->string) return x->string;
  }
  return NULL;
}

// s edited: a character appended, the end cut, a control byte or '.' put in, doubled.
static cJSON *string_edit(Rng *r, const char *s) {
  size_t n = strlen(s);
  char *t = malloc(2 * n + 2);
  if (!t) return NULL;
  switch (rng_below(r, 5)) {
  case 0:
    snprintf(t, 2 * n + 2, "%s%c", s, "x._0/\n"[rng_below(r, 6)]);
    break;
  case 1:
    snprintf(t, 2 * n + 2, "%.*s", (int)(n ? rng_below(r, n) : 0), s);
    break;
  case 2:
    memcpy(t, s, n + 1);
    if (n) t[rng_below(r, n)] = "\n\x01.\x7f/"[rng_below(r, 5)];
    break;
  case 3:
    snprintf(t, 2 * n + 2, "%s%s", s, s);
    break;
  default:
    snprintf(t, 2 * n + 2, "%s", STRINGS[rng_below(r, COUNT(STRINGS))]);
    break;
  }
  cJSON *x = cJSON_CreateString(t);
  free(t);
  return x;
}

// ---- the mutations

// An array (or object) reordered, emptied or with one element repeated.
static void reshape(Rng *r, cJSON *x) {
  int n = cJSON_GetArraySize(x);
  if (!n) return;
  switch (rng_below(r, 3)) {
  case 0: // reversed: the last element moved to place i, for each i
    for (cJSON *c = x->child, *prev = NULL, *next; c; prev = c, c = next) {
      next = c->next;
      c->next = prev;
      if (!next) x->child = c;
    }
    relink(x);
    break;
  case 1:
    cJSON_Delete(x->child); // frees the whole list
    x->child = NULL;
    break;
  default: {
    cJSON *e = cJSON_GetArrayItem(x, (int)rng_below(r, (uint64_t)n));
    int times = 1 + (int)rng_below(r, rng_chance(r, 80) ? 4 : 100);
    for (int i = 0; i < times; i++) insert_after(x, e, cJSON_Duplicate(e, true));
  }
  }
}

void mutate_json_tree(Rng *r, cJSON *root, const cJSON *donor) {
  cJSON *parent = NULL, *x = pick(r, root, &parent);
  if (!x) return;
  switch (rng_below(r, 10)) {
  case 0:
    detach_delete(parent, x);
    break;
  case 1:
    insert_after(parent, x, cJSON_Duplicate(x, true));
    break;
  case 2:
    replace(parent, x, interesting_value(r));
    break;
  case 3:
    replace(parent, x, cJSON_IsNumber(x) ? number_tweak(r, x) : interesting_value(r));
    break;
  case 4: { // a copy of another value of this document
    cJSON *p2, *y = pick(r, root, &p2);
    if (y && y != x) replace(parent, x, cJSON_Duplicate(y, true));
    break;
  }
  case 5: { // a subtree of another document
    if (!donor) break;
    cJSON *p2, *y = pick(r, (cJSON *)donor, &p2);
    if (y) replace(parent, x, cJSON_Duplicate(y, true));
    break;
  }
  case 6: { // a string: another string of the document, or this one edited
    const char *s = cJSON_IsString(x) ? x->valuestring : NULL;
    const char *other = rng_chance(r, 50) ? some_string(r, root) : NULL;
    if (other)
      replace(parent, x, cJSON_CreateString(other));
    else if (s)
      replace(parent, x, string_edit(r, s));
    break;
  }
  case 7: { // a member renamed: another key of the document, or this key edited
    if (!x->string) break;
    const char *other = some_string(r, root);
    cJSON *e = other && rng_chance(r, 50) ? NULL : string_edit(r, x->string);
    set_key(x, e ? e->valuestring : other);
    cJSON_Delete(e);
    break;
  }
  case 8:
    if (cJSON_IsArray(x) || cJSON_IsObject(x)) reshape(r, x);
    break;
  default: { // wrapped: [x] or {"k": x}
    cJSON *w = rng_chance(r, 50) ? cJSON_CreateArray() : cJSON_CreateObject();
    cJSON *inner = cJSON_Duplicate(x, true);
    if (!w || !inner) {
      cJSON_Delete(w), cJSON_Delete(inner);
      break;
    }
    set_key(inner, cJSON_IsObject(w) ? (x->string ? x->string : "k") : NULL);
    cJSON_AddItemToArray(w, inner);
    replace(parent, x, w);
  }
  }
}

void json_print(Rng *r, const cJSON *tree, Buf *b) {
  char *s = rng_chance(r, 70) ? cJSON_Print(tree) : cJSON_PrintUnformatted(tree);
  if (s) buf_set(b, s, strlen(s));
  free(s);
}

// The k-th number below x in pre-order (k counts down), with its parent.
static cJSON *nth_number(cJSON *x, int *k, cJSON **parent) {
  for (cJSON *c = x->child; c; c = c->next) {
    if (cJSON_IsNumber(c) && (*k)-- == 0) {
      *parent = x;
      return c;
    }
    cJSON *found = nth_number(c, k, parent);
    if (found) return found;
  }
  return NULL;
}

static int count_numbers(const cJSON *x) {
  int n = 0;
  for (const cJSON *c = x->child; c; c = c->next) n += cJSON_IsNumber(c) + count_numbers(c);
  return n;
}

bool mutate_json_numbers(Rng *r, Buf *b) {
  cJSON *root = cJSON_ParseWithLength((const char *)b->p, b->n);
  int n = root ? count_numbers(root) : 0;
  if (!n) {
    cJSON_Delete(root);
    return false;
  }
  int k = 1 + (int)rng_below(r, 3);
  for (int i = 0; i < k; i++) {
    int at = (int)rng_below(r, (uint64_t)n);
    cJSON *parent = NULL, *x = nth_number(root, &at, &parent);
    if (!x) break;
    replace(parent, x,
            rng_chance(r, 50) ? number_tweak(r, x)
                              : cJSON_CreateRaw(NUMBERS[rng_below(r, COUNT(NUMBERS))]));
    n = count_numbers(root); // a raw literal is no longer a number item
    if (!n) break;
  }
  json_print(r, root, b);
  cJSON_Delete(root);
  return true;
}

bool mutate_json_text(Rng *r, Buf *b, const cJSON *donor) {
  cJSON *root = cJSON_ParseWithLength((const char *)b->p, b->n);
  if (!root) return false;
  int k = 1 + (int)rng_below(r, rng_chance(r, 70) ? 2 : 4);
  for (int i = 0; i < k; i++) mutate_json_tree(r, root, donor);
  json_print(r, root, b);
  cJSON_Delete(root);
  return true;
}
