// The model's `training` section (docs/model-format.md, "Training"), read into a TrainConfig,
// then `--set key=value` overrides from the command line. Every key is described once in a table
// (name, type, destination, range) that serves the file and the overrides alike. A few keys hold
// only for some data (data.shuffle false and data.train_fraction 1: tables), checked once both are
// read (data_kind_keys).
#include <ctype.h>
#include <errno.h>
#include <libgen.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ir/ops.h"
#include "json.h"
#include "program.h"
#include "training.h"

typedef enum KeyType {
  K_INT, // an integer (int64_t)
  K_NUM, // a number (double)
  K_STR, // a string (const char *)
  K_BOOL // true or false (bool): JSON's literals, or the words after --set KEY=
} KeyType;

typedef struct Key {
  const char *name; // key in the training section (dots: nested objects)
  KeyType type;     // value type
  size_t off;       // offset of the destination in TrainConfig
  double lo, hi;    // valid range (inclusive) for numbers
} Key;

#define F(field) offsetof(TrainConfig, field)
static const Key keys[] = {
    {"batch", K_INT, F(batch), 1, 1 << 24},
    {"microbatches", K_INT, F(microbatches), 1, 1 << 20},
    {"steps", K_INT, F(steps), 0, 1e12},
    {"seed", K_INT, F(seed), 0, 9007199254740991.0},
    {"optimizer.lr", K_NUM, F(lr), 1e-12, 1e6},
    {"optimizer.beta1", K_NUM, F(beta1), 0, 0.999999},
    {"optimizer.beta2", K_NUM, F(beta2), 0, 0.99999999},
    {"optimizer.eps", K_NUM, F(eps), 0, 1},
    {"optimizer.weight_decay", K_NUM, F(weight_decay), 0, 1e6},
    {"optimizer.momentum", K_NUM, F(momentum), 0, 0.999999},
    {"schedule.warmup", K_INT, F(warmup), 0, 1e12},
    {"schedule.decay_steps", K_INT, F(decay_steps), 0, 1e12},
    {"schedule.min_lr", K_NUM, F(min_lr), 0, 1e6},
    {"grad_clip", K_NUM, F(grad_clip), 0, 1e12},
    {"eval_every", K_INT, F(eval_every), 0, 1e12},
    {"eval_batches", K_INT, F(eval_batches), 0, 1e9},
    {"log_every", K_INT, F(log_every), 1, 1e12},
    {"data.path", K_STR, F(data_path), 0, 0},
    {"data.labels", K_STR, F(data_labels), 0, 0},
    {"data.train_fraction", K_NUM, F(train_fraction), 0.01, 1},
    {"data.scale", K_NUM, F(scale), -1e12, 1e12},
    {"data.shuffle", K_BOOL, F(shuffle), 0, 0},
};
#undef F
enum { NKEYS = sizeof keys / sizeof keys[0] };

static const Key *find_key(const char *name) {
  for (int i = 0; i < NKEYS; i++)
    if (strcmp(keys[i].name, name) == 0) return &keys[i];
  return NULL;
}

// Stores a number or string into the field described by k; msg gets the reason on failure.
// text: the number as the user wrote it (for messages).
static bool store(const Key *k, TrainConfig *tc, double num, const char *text, const char *str,
                  char *msg, size_t cap) {
  char *dst = (char *)tc + k->off;
  if (k->type == K_STR) {
    if (!str) return snprintf(msg, cap, "expected a string"), false;
    *(const char **)dst = str;
    return true;
  }
  if (str) return snprintf(msg, cap, "expected a number"), false;
  if (k->type == K_INT && num != floor(num))
    return snprintf(msg, cap, "expected an integer, got %s", text), false;
  if (!(num >= k->lo && num <= k->hi))
    return snprintf(msg, cap, "must be from %.15g to %.15g, got %s", k->lo, k->hi, text), false;
  if (k->type == K_INT) {
    *(int64_t *)dst = (int64_t)num;
  } else {
    *(double *)dst = num;
  }
  return true;
}

// Walks one JSON object level of the training section; prefix is "" or "optimizer." etc.
static bool read_object(const Source *src, const cJSON *obj, const char *prefix, TrainConfig *tc,
                        Diag *d, Arena *a) {
  for (const cJSON *c = obj->child; c; c = c->next) {
    char name[128];
    snprintf(name, sizeof name, "%s%s", prefix, json_shown(a, c->string)); // for messages too
    for (const cJSON *e = obj->child; e != c; e = e->next)
      if (strcmp(e->string, c->string) == 0) {
        diag_error(d, source_loc(src, c), "training.%s: duplicate key", name);
        return false;
      }
    bool section = !*prefix && (!strcmp(c->string, "optimizer") || !strcmp(c->string, "schedule") ||
                                !strcmp(c->string, "data"));
    if (section && !cJSON_IsObject(c)) {
      diag_error(d, source_loc(src, c), "training.%s: expected an object", name);
      return false;
    }
    if (section) {
      char sub[64];
      snprintf(sub, sizeof sub, "%s.", c->string);
      if (!read_object(src, c, sub, tc, d, a)) return false;
      continue;
    }
    // Keys that are not plain numbers/strings of the table.
    if (!strcmp(name, "optimizer.kind") || !strcmp(name, "data.kind") ||
        !strcmp(name, "data.input") || !strcmp(name, "data.target") ||
        !strcmp(name, "data.columns") || !strcmp(name, "data.files") ||
        !strcmp(name, "optimizer.betas"))
      continue; // read by training_parse and training_data_bind
    const Key *k = find_key(name);
    if (!k) {
      // Suggest among the keys of this level (table keys and the specially read ones).
      static const char *const extra[] = {"optimizer",      "schedule",        "data",
                                          "optimizer.kind", "optimizer.betas", "data.kind",
                                          "data.input",     "data.target",     "data.columns",
                                          "data.files"};
      enum { NEXTRA = sizeof extra / sizeof extra[0] };
      const char *cands[NKEYS + NEXTRA];
      int nc = 0;
      size_t pl = strlen(prefix);
      for (int i = 0; i < NKEYS + NEXTRA; i++) {
        const char *kn = i < NKEYS ? keys[i].name : extra[i - NKEYS];
        if (strncmp(kn, prefix, pl) == 0 && !strchr(kn + pl, '.')) cands[nc++] = kn + pl;
      }
      diag_error(d, source_loc(src, c), "training.%s: unknown key%s", name,
                 json_suggest(a, c->string, cands, nc));
      return false;
    }
    if (k->type == K_BOOL) {
      if (!cJSON_IsBool(c)) {
        diag_error(d, source_loc(src, c), "training.%s: expected true or false", name);
        return false;
      }
      *(bool *)((char *)tc + k->off) = cJSON_IsTrue(c);
      continue;
    }
    char msg[200];
    const char *str = cJSON_IsString(c) ? arena_strdup(a, c->valuestring) : NULL;
    if (!cJSON_IsNumber(c) && !cJSON_IsString(c)) {
      diag_error(d, source_loc(src, c), "training.%s: expected a %s", name,
                 k->type == K_STR ? "string" : "number");
      return false;
    }
    char text[80] = "";
    double num = 0;
    if (cJSON_IsNumber(c)) {
      int64_t iv;
      source_number_str(src, c, text, sizeof text);
      num = c->valuedouble;
      if (k->type == K_INT) { // exact, from the digits: cJSON's double rounds past 2^53
        if (!source_int(src, c, &iv) && num == floor(num)) {
          diag_error(d, source_loc(src, c),
                     "training.%s: expected an integer within +-2^53, got %s", name, text);
          return false;
        }
        if (source_int(src, c, &iv)) num = (double)iv;
      }
    }
    if (!store(k, tc, num, text, str, msg, sizeof msg)) {
      diag_error(d, source_loc(src, c), "training.%s: %s", name, msg);
      return false;
    }
  }
  return true;
}

static const cJSON *sub(const cJSON *o, const char *k) {
  return o ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
}

// --set KEY=true|false; false when the value is neither word.
static bool store_bool(const Key *k, TrainConfig *tc, const char *value) {
  bool v = !strcmp(value, "true");
  if (!v && strcmp(value, "false")) return false;
  *(bool *)((char *)tc + k->off) = v;
  return true;
}

// Where key `name` ("data.shuffle") has its value: nowhere in the file when --set gave it
// (set[i]: keys[i] came from --set), else its place in the training section.
static Loc key_loc(const Source *src, const cJSON *tr, const bool *set, const char *name) {
  const Key *k = find_key(name);
  if (k && set[k - keys]) return (Loc){0, 0};
  const char *dot = strchr(name, '.');
  char head[64];
  snprintf(head, sizeof head, "%.*s", dot ? (int)(dot - name) : (int)strlen(name), name);
  const cJSON *at = dot ? sub(sub(tr, head), dot + 1) : sub(tr, name);
  return at ? source_loc(src, at) : (Loc){0, 0};
}

// The keys that only table data takes: data.shuffle false (token windows are drawn at random
// offsets; there is no order of rows to keep) and data.train_fraction 1 (no validation split:
// token runs evaluate at their end on windows of it).
static bool data_kind_keys(const Source *src, const cJSON *tr, const bool *set,
                           const TrainConfig *tc, Diag *d) {
  if (tc->data != DATA_TEXT && tc->data != DATA_U16) return true;
  if (!tc->shuffle) {
    diag_error(d, key_loc(src, tr, set, "data.shuffle"),
               "training.data.shuffle: false is for tables (csv, npy); token data draws its "
               "windows at random offsets");
    return false;
  }
  if (tc->train_fraction >= 1) {
    diag_error(d, key_loc(src, tr, set, "data.train_fraction"),
               "training.data.train_fraction: 1 leaves no validation split, which token data "
               "needs (1 is for tables: csv, npy)");
    return false;
  }
  return true;
}

// The model file's directory, a real path where it resolves.
static const char *model_dir(Arena *a, const Source *src) {
  char *dir = arena_strdup(a, src->path), *real = realpath(dirname(dir), NULL);
  if (real) {
    dir = arena_strdup(a, real);
    free(real);
  }
  return dir;
}

bool training_parse(const Source *src, Graph *g, const char **overrides, int noverrides,
                    TrainConfig *tc, Diag *d) {
  Arena *a = g->arena;
  *tc = (TrainConfig){.batch = 8,
                      .microbatches = 1,
                      .steps = 100,
                      .seed = 1337,
                      .opt = OPT_ADAMW,
                      .lr = 1e-3,
                      .beta1 = 0.9,
                      .beta2 = 0.999,
                      .eps = 1e-8,
                      .weight_decay = 0.0,
                      .momentum = 0.0,
                      .min_lr = 0,
                      .eval_every = 0,
                      .eval_batches = 20,
                      .log_every = 10,
                      .train_fraction = 0.9,
                      .scale = 1.0,
                      .shuffle = true};
  const cJSON *tr = sub(src->root, "training");
  const cJSON *opt = sub(tr, "optimizer"), *data = sub(tr, "data");
  if (tr && !read_object(src, tr, "", tc, d, a)) return false;
  const cJSON *kind = sub(opt, "kind");
  if (kind) {
    if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "adamw"))
      tc->opt = OPT_ADAMW;
    else if (cJSON_IsString(kind) && !strcmp(kind->valuestring, "sgd"))
      tc->opt = OPT_SGD;
    else {
      diag_error(d, source_loc(src, kind),
                 "training.optimizer.kind: expected \"adamw\" or \"sgd\"");
      return false;
    }
  }
  const cJSON *betas = sub(opt, "betas");
  if (betas) {
    if (!cJSON_IsArray(betas) || cJSON_GetArraySize(betas) != 2 || !cJSON_IsNumber(betas->child) ||
        !cJSON_IsNumber(betas->child->next)) {
      diag_error(d, source_loc(src, betas), "training.optimizer.betas: expected [beta1, beta2]");
      return false;
    }
    char msg[200];
    char t1[80], t2[80];
    source_number_str(src, betas->child, t1, sizeof t1);
    source_number_str(src, betas->child->next, t2, sizeof t2);
    if (!store(find_key("optimizer.beta1"), tc, betas->child->valuedouble, t1, NULL, msg,
               sizeof msg) ||
        !store(find_key("optimizer.beta2"), tc, betas->child->next->valuedouble, t2, NULL, msg,
               sizeof msg)) {
      diag_error(d, source_loc(src, betas), "training.optimizer.betas: %s", msg);
      return false;
    }
  }
  const cJSON *dk = sub(data, "kind");
  if (data) {
    static const char *const kinds[] = {"text", "tokens_u16", "csv", "npy"};
    int k = -1;
    for (int i = 0; i < 4 && dk; i++)
      if (cJSON_IsString(dk) && !strcmp(dk->valuestring, kinds[i])) k = i;
    if (k < 0) {
      diag_error(d, source_loc(src, dk ? dk : data),
                 "training.data.kind: expected text, tokens_u16, csv or npy");
      return false;
    }
    tc->data = (DataKind)(DATA_TEXT + k);
  }
  bool batch_set = false; // batch or microbatches came from --set: the file is not the cause
  bool set[NKEYS] = {false}; // keys[i] came from --set
  for (int i = 0; i < noverrides; i++) {
    const char *eq = strchr(overrides[i], '=');
    char name[128], msg[200];
    size_t nl = eq ? (size_t)(eq - overrides[i]) : 0;
    const Key *k = NULL;
    if (eq && nl < sizeof name) {
      memcpy(name, overrides[i], nl);
      name[nl] = 0;
      k = find_key(name);
    }
    if (!k) {
      diag_error(
          d, (Loc){0, 0},
          "--set %s: expected KEY=VALUE with a training key (e.g. steps=100, optimizer.lr=3e-4)",
          overrides[i]);
      return false;
    }
    set[k - keys] = true;
    if (k->type == K_BOOL) {
      if (!store_bool(k, tc, eq + 1)) {
        diag_error(d, (Loc){0, 0}, "--set %s: expected true or false", overrides[i]);
        return false;
      }
      continue;
    }
    char *end;
    errno = 0;
    double v = k->type == K_STR ? 0 : strtod(eq + 1, &end);
    if (k->type != K_STR && (errno || end == eq + 1 || *end)) {
      diag_error(d, (Loc){0, 0}, "--set %s: '%s' is not a number", overrides[i], eq + 1);
      return false;
    }
    if (!store(k, tc, v, eq + 1, k->type == K_STR ? eq + 1 : NULL, msg, sizeof msg)) {
      diag_error(d, (Loc){0, 0}, "--set %s: %s", overrides[i], msg);
      return false;
    }
    batch_set |= !strcmp(k->name, "batch") || !strcmp(k->name, "microbatches");
  }
  if (tc->batch % tc->microbatches) {
    // Point at the file when both numbers came from it (microbatches > 1 is written there, batch
    // is written there or the default), not when an override of either is the cause.
    const cJSON *at = sub(tr, "microbatches");
    diag_error(d, batch_set ? (Loc){0, 0} : source_loc(src, at),
               "training: batch %lld is not a multiple of microbatches %lld", (long long)tc->batch,
               (long long)tc->microbatches);
    return false;
  }
  tc->mb_size = tc->batch / tc->microbatches;
  if (!data_kind_keys(src, tr, set, tc, d)) return false;
  if (tc->data != DATA_NONE) {
    if (!tc->data_path && !(tc->data == DATA_NPY && sub(data, "files"))) {
      diag_error(d, source_loc(src, data), "training.data: missing 'path'");
      return false;
    }
    // Data paths are relative to the model file; here they are made absolute. Codegen writes one
    // that was relative relative to the program again (codegen/paths.c), so the generated source
    // does not depend on the directories, and the program finds it from any working directory.
    const char *dir = model_dir(a, src);
    if (tc->data_path) {
      tc->data_rel = tc->data_path[0] != '/';
      tc->data_path = training_data_path(a, dir, tc->data_path);
    }
    if (!training_data_bind(src, g, data, dir, tc, d)) return false;
  }
  if (g->weights) { // the model's initial parameters: a path like the data's
    tc->weights_rel = g->weights[0] != '/';
    tc->weights_path = training_data_path(a, model_dir(a, src), g->weights);
  }
  // Every tensor must fit once the batch symbol is bound.
  for (int i = 0; i < g->ntensors; i++)
    if (shape_numel(&g->tensors[i]->shape, tc->mb_size) < 0) {
      diag_error(d, g->tensors[i]->loc, "%s: '%s' %s has more than 2^53 elements with %s = %lld",
                 g->tensors[i]->path, g->tensors[i]->name, fmt_shape(g, &g->tensors[i]->shape),
                 g->batch_sym, (long long)tc->mb_size);
      return false;
    }
  return true;
}

const Tensor *accuracy_logits(const Node *n) {
  return n->in[n->op->ids->of];
}

const Tensor *accuracy_ids(const Node *n) {
  return n->in[n->op->ids->slot];
}

void training_accuracy(TrainConfig *tc) {
  tc->accuracy = NULL;
  if (tc->data != DATA_CSV && tc->data != DATA_NPY) return;
  const Node *found = NULL;
  for (int i = 0; i < tc->nfeeds; i++) {
    const Tensor *y = tc->feeds[i].t;
    if (!tc->feeds[i].target || y->dtype != DT_I32) continue; // regression: the loss only
    for (int u = 0; u < y->nuses; u++) {
      const Node *n = y->uses[u].node;
      const IndexBound *ids = n->op->ids;
      if (n->role != ROLE_FWD || !ids || ids->slot != y->uses[u].slot ||
          strcmp(ids->what, "classes") != 0)
        continue;
      if (found) return; // two classifications: which one's accuracy is ambiguous
      found = n;
    }
  }
  if (!found) return;
  const Tensor *l = accuracy_logits(found);
  bool trained = false;
  for (int u = 0; u < l->nuses; u++) trained |= l->uses[u].node->role != ROLE_FWD;
  if (l->dtype == DT_F32 && l->shape.rank == 2 && trained) tc->accuracy = found;
}

// Shortest %g form that reads back as v.
static const char *num_str(char *buf, size_t cap, double v) {
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(buf, cap, "%.*g", prec, v);
    if (strtod(buf, NULL) == v) break;
  }
  return buf;
}

void training_print(const Graph *g, const TrainConfig *tc, FILE *out) {
  static const char *const data_kinds[] = {"none", "text", "tokens_u16", "csv", "npy"};
  fprintf(out, "training for %s: batch %lld = %lld microbatch%s of %lld\n", g->name,
          (long long)tc->batch, (long long)tc->microbatches, tc->microbatches == 1 ? "" : "es",
          (long long)tc->mb_size);
  for (int i = 0; i < NKEYS; i++) {
    const char *dst = (const char *)tc + keys[i].off;
    char buf[64];
    const char *v = buf;
    if (keys[i].type == K_INT)
      snprintf(buf, sizeof buf, "%lld", (long long)*(const int64_t *)dst);
    else if (keys[i].type == K_NUM)
      num_str(buf, sizeof buf, *(const double *)dst);
    else if (keys[i].type == K_BOOL)
      v = *(const bool *)dst ? "true" : "false";
    else
      v = *(const char *const *)dst ? *(const char *const *)dst : "-";
    fprintf(out, "  %-24s %s\n", keys[i].name, v);
  }
  fprintf(out, "  %-24s %s\n", "optimizer.kind", tc->opt == OPT_ADAMW ? "adamw" : "sgd");
  fprintf(out, "  %-24s %s\n", "data.kind", data_kinds[tc->data]);
  for (int target = 0; target < 2; target++) {
    char names[512] = "";
    size_t len = 0;
    for (int i = 0; i < tc->nfeeds; i++)
      if (tc->feeds[i].target == target && len < sizeof names)
        len += (size_t)snprintf(names + len, sizeof names - len, "%s%s", len ? ", " : "",
                                tc->feeds[i].t->name);
    fprintf(out, "  %-24s %s\n", target ? "data.target" : "data.input", len ? names : "-");
  }
  for (int i = 0; i < tc->nfeeds; i++) { // where each comes from: its columns or its file
    const Feed *f = &tc->feeds[i];
    if (tc->data == DATA_CSV)
      fprintf(out, "  %-24s %lld..%lld\n", arena_printf(g->arena, "data.columns.%s", f->t->name),
              (long long)f->col, (long long)(f->col + f->width - 1));
    else if (tc->data == DATA_NPY)
      fprintf(out, "  %-24s %s\n", arena_printf(g->arena, "data.files.%s", f->t->name), f->file);
  }
}
