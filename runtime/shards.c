// shards.c: sharded checkpoints, a directory in the Hugging Face convention: every rank writes
// the parameters it is home for into DIR/model-RRRRR-of-NNNNN.safetensors and their optimizer
// state into DIR/optimizer-RRRRR-of-NNNNN.safetensors; DIR/model.safetensors.index.json and
// DIR/optimizer.safetensors.index.json map each tensor name to its file ("weight_map") and carry
// the save id, the step and the vocabulary in "metadata", as the shards' headers do. A directory
// written at any number of ranks loads at any other: each rank reads, file by file, the tensors it
// holds, so --init and --resume do not care how the checkpoint was cut.
//
// The save id of a sharded save hashes the step and every rank's shard hash in rank order (each
// rank hashes its own tensors as checkpoint.c hashes a whole file); one all-gather gives every
// rank the id before anything is written. The commit is one rename. Save: (0) the save rank
// recovers (below); (1) every rank writes its two shards as NAME.tmp.PID (PID: the save rank's),
// fsync'ed, and the ranks all-gather the errors: on any failure every rank removes its
// temporaries and the previous checkpoint stays; (2) the save rank writes both indexes as
// temporaries, fsync'ed, then renames the model index into place: the commit; (3) it renames the
// optimizer index and every shard into place, and removes the shards of earlier saves that the
// new index does not name (a save at another rank count leaves fewer or more files).
// Recovery (the save rank, before every resume, init and save): the model index's save id is the
// committed save; every file it or the optimizer index names that lacks that id is rolled forward
// from a complete temporary with it; then temporaries of other saves (unless their process still
// runs) and pipec shards of older saves are removed. A crash at any moment thus leaves the old
// checkpoint or the new one, whole.
// Verification (the save rank, after its load): the save id recomputed from every shard the
// indexes name, as the save hashed each rank's pair of shards (N and R from the shards' names);
// another id is bit rot, refused naming the directory. --init verifies when the optimizer index
// of the same save and the shards it names are there (the id hashes both halves).
#define _FILE_OFFSET_BITS 64
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_impl.h"
#include "comm.h"

#define SH_PATH      4096
#define SH_ID        32
#define SH_INDEX_MAX (256 << 20) // bytes: an index beyond this is not a checkpoint's

enum { SH_MODEL, SH_OPTIM };                                    // the two halves
static const char *const SH_PREFIX[2] = {"model", "optimizer"}; // their file name prefixes
static const char *const HINT_SHARDS =
    "load a directory written by one --save DIR/ (both indexes and every shard they name)";

// ---------------------------------------------------------------------------------------------
// Names

bool pr_shards_dir(const char *path, bool reading, char *dir, size_t cap) {
  size_t len = strlen(path);
  static const char ix[] = ".safetensors.index.json";
  char copy[SH_PATH];
  struct stat st;
  if (len >= sizeof copy) return false;
  if (len > sizeof ix - 1 && strcmp(path + len - (sizeof ix - 1), ix) == 0) {
    strcpy(copy, path);
    snprintf(dir, cap, "%s", dirname(copy));
    return true;
  }
  if ((len > 0 && path[len - 1] == '/') ||
      (reading && stat(path, &st) == 0 && S_ISDIR(st.st_mode))) {
    while (len > 1 && path[len - 1] == '/') len--;
    snprintf(dir, cap, "%.*s", (int)len, path);
    return true;
  }
  return false;
}

static void index_path(char *out, const char *dir, int half) {
  prCheck(snprintf(out, SH_PATH, "%s/%s.safetensors.index.json", dir, SH_PREFIX[half]) < SH_PATH,
          "use a shorter path", "checkpoint directory path too long: '%.200s...'", dir);
}

static void shard_name(char *out, size_t cap, int half, int r, int n) {
  snprintf(out, cap, "%s-%05d-of-%05d.safetensors", SH_PREFIX[half], r + 1, n);
}

// A pipec shard's file name: PREFIX-DDDDD-of-DDDDD.safetensors (half receives which).
static bool is_shard_name(const char *s, int *half) {
  for (int h = 0; h < 2; h++) {
    size_t p = strlen(SH_PREFIX[h]);
    if (strncmp(s, SH_PREFIX[h], p) != 0) continue;
    const char *t = s + p;
    static const char pat[] = "-#####-of-#####.safetensors";
    size_t i = 0;
    for (; pat[i]; i++)
      if (pat[i] == '#' ? !(t[i] >= '0' && t[i] <= '9') : t[i] != pat[i]) break;
    if (!pat[i] && !t[i]) return *half = h, true;
  }
  return false;
}

// ---------------------------------------------------------------------------------------------
// Indexes

typedef struct Entry {
  const char *name; // tensor name
  const char *file; // its shard's file name
  bool used;        // matched by a tensor of the program
} Entry;

typedef struct Index {
  cJSON *root;       // the parsed file
  char id[SH_ID];    // metadata "save_id" ("" when absent)
  char step[64];     // metadata "step" ("" when absent)
  Entry *e;          // weight_map entries, sorted by name
  int n;             // count
  const char **file; // the distinct file names, sorted
  int nfile;         // count
} Index;

static int entry_cmp(const void *a, const void *b) {
  return strcmp(((const Entry *)a)->name, ((const Entry *)b)->name);
}

static int str_cmp(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void index_free(Index *ix) {
  cJSON_Delete(ix->root);
  free(ix->e);
  free(ix->file);
  memset(ix, 0, sizeof *ix);
}

static void meta_str(const cJSON *meta, const char *key, char *out, size_t cap) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(meta, key);
  snprintf(out, cap, "%s", cJSON_IsString(v) ? v->valuestring : "");
}

// Reads and checks an index: false with the reason in why (the file is left alone).
static bool index_read(const char *path, Index *ix, char *why, size_t cap) {
  memset(ix, 0, sizeof *ix);
  struct stat st;
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return snprintf(why, cap, "cannot open it: %s", strerror(errno)), false;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > SH_INDEX_MAX) {
    close(fd);
    return snprintf(why, cap, "not a regular file of at most %d MiB", SH_INDEX_MAX >> 20), false;
  }
  char *text = malloc((size_t)st.st_size + 1);
  prCheck(text != NULL, "the machine is out of memory", "cannot read '%s'", path);
  size_t got = 0;
  for (ssize_t k;
       got < (size_t)st.st_size && (k = read(fd, text + got, (size_t)st.st_size - got)) > 0;)
    got += (size_t)k;
  close(fd);
  ix->root = got == (size_t)st.st_size ? cJSON_ParseWithLength(text, got) : NULL;
  free(text);
  if (!ix->root) return snprintf(why, cap, "not valid JSON"), false;
  const cJSON *map = cJSON_GetObjectItemCaseSensitive(ix->root, "weight_map");
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(ix->root, "metadata");
  if (!cJSON_IsObject(ix->root) || !cJSON_IsObject(map)) {
    index_free(ix);
    return snprintf(why, cap, "no \"weight_map\" object"), false;
  }
  meta_str(meta, "save_id", ix->id, sizeof ix->id);
  meta_str(meta, "step", ix->step, sizeof ix->step);
  int n = cJSON_GetArraySize(map);
  ix->e = calloc((size_t)n + 1, sizeof *ix->e);
  ix->file = calloc((size_t)n + 1, sizeof *ix->file);
  prCheck(ix->e && ix->file, "the machine is out of memory", "cannot read '%s'", path);
  for (const cJSON *it = map->child; it; it = it->next) {
    const char *f = cJSON_IsString(it) ? it->valuestring : NULL;
    // A shard is a file of the index's own directory: no path, no hidden or parent names.
    if (!f || !f[0] || strchr(f, '/') || f[0] == '.') {
      snprintf(why, cap, "weight_map[\"%.100s\"] is not a file name of the directory",
               it->string ? it->string : "");
      index_free(ix);
      return false;
    }
    ix->e[ix->n++] = (Entry){it->string, f, false};
    ix->file[ix->nfile++] = f;
  }
  qsort(ix->e, (size_t)ix->n, sizeof *ix->e, entry_cmp);
  for (int i = 1; i < ix->n; i++)
    if (strcmp(ix->e[i - 1].name, ix->e[i].name) == 0) {
      snprintf(why, cap, "tensor '%.100s' appears twice in weight_map", ix->e[i].name);
      index_free(ix);
      return false;
    }
  qsort(ix->file, (size_t)ix->nfile, sizeof *ix->file, str_cmp);
  int k = 0;
  for (int i = 0; i < ix->nfile; i++)
    if (k == 0 || strcmp(ix->file[k - 1], ix->file[i]) != 0) ix->file[k++] = ix->file[i];
  ix->nfile = k;
  return true;
}

// Reads an index or stops the program naming it.
static void index_load(const char *path, Index *ix) {
  char why[256];
  if (access(path, F_OK) != 0)
    pr_fail(__FILE__, __LINE__, HINT_SHARDS, "cannot open '%s': %s", path, strerror(errno));
  prCheck(index_read(path, ix, why, sizeof why), HINT_SHARDS, "%s: %s", path, why);
}

static const Entry *index_find(const Index *ix, const char *name) {
  Entry key = {name, NULL, false};
  return bsearch(&key, ix->e, (size_t)ix->n, sizeof *ix->e, entry_cmp);
}

// An index's save id without stopping ("" when it cannot be read).
static void index_id(const char *path, char *id, size_t cap) {
  Index ix;
  char why[256];
  id[0] = '\0';
  if (index_read(path, &ix, why, sizeof why)) snprintf(id, cap, "%s", ix.id);
  index_free(&ix);
}

// ---------------------------------------------------------------------------------------------
// Recovery

// The temporaries NAME.tmp.DIGITS of dir/name: calls f for each with its path and PID.
typedef struct Temp {
  char path[SH_PATH]; // the temporary
  char target[256];   // the name it becomes
  long pid;           // the process that wrote it
} Temp;

static int list_temps(const char *dir, Temp **out) {
  DIR *d = opendir(dir);
  int n = 0;
  *out = NULL;
  if (!d) return 0;
  for (struct dirent *de; (de = readdir(d));) {
    const char *t = strstr(de->d_name, ".tmp.");
    if (!t || t == de->d_name || (size_t)(t - de->d_name) >= sizeof(*out)->target) continue;
    const char *p = t + 5;
    while (*p >= '0' && *p <= '9') p++;
    if (*p || p == t + 5 || p - (t + 5) > 9) continue;
    char target[256];
    int half;
    snprintf(target, sizeof target, "%.*s", (int)(t - de->d_name), de->d_name);
    bool ours = is_shard_name(target, &half) ||
                strcmp(target, "model.safetensors.index.json") == 0 ||
                strcmp(target, "optimizer.safetensors.index.json") == 0;
    if (!ours) continue;
    Temp *grown = realloc(*out, (size_t)(n + 1) * sizeof **out);
    prCheck(grown != NULL, "the machine is out of memory", "out of memory listing '%s'", dir);
    *out = grown;
    Temp *m = &grown[n++];
    snprintf(m->path, sizeof m->path, "%s/%s", dir, de->d_name);
    snprintf(m->target, sizeof m->target, "%s", target);
    m->pid = strtol(t + 5, NULL, 10);
  }
  closedir(d);
  return n;
}

// The save id of a file of the checkpoint (an index or a shard; "" when unreadable).
static void file_id(const char *path, const char *name, char *id, size_t cap) {
  int half;
  if (is_shard_name(name, &half)) {
    if (!pr_safetensors_peek(path, "save_id", id, cap)) id[0] = '\0';
  } else {
    index_id(path, id, cap);
  }
}

// Makes dir/name the file of save id: when it lacks the id, a complete temporary with it
// replaces it. True when something moved.
static bool roll_forward(const char *dir, const char *name, const char *id, Temp *t, int nt) {
  char path[SH_PATH], have[SH_ID];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  file_id(path, name, have, sizeof have);
  if (strcmp(have, id) == 0) return false;
  for (int i = 0; i < nt; i++) {
    if (!t[i].path[0] || strcmp(t[i].target, name) != 0) continue;
    file_id(t[i].path, name, have, sizeof have);
    if (strcmp(have, id) == 0 && rename(t[i].path, path) == 0) {
      t[i].path[0] = '\0';
      return true;
    }
  }
  return false;
}

void pr_shards_recover(const char *dir) {
  char mpath[SH_PATH], opath[SH_PATH], id[SH_ID], why[256];
  index_path(mpath, dir, SH_MODEL);
  index_path(opath, dir, SH_OPTIM);
  Temp *t;
  int nt = list_temps(dir, &t);
  bool moved = false;
  Index ix[2];
  memset(ix, 0, sizeof ix);
  index_id(mpath, id, sizeof id);
  if (id[0]) {
    moved |= roll_forward(dir, "optimizer.safetensors.index.json", id, t, nt);
    for (int h = 0; h < 2; h++) {
      if (!index_read(h == SH_MODEL ? mpath : opath, &ix[h], why, sizeof why)) continue;
      if (strcmp(ix[h].id, id) != 0) continue;
      for (int f = 0; f < ix[h].nfile; f++) moved |= roll_forward(dir, ix[h].file[f], id, t, nt);
    }
  }
  for (int i = 0; i < nt; i++) // temporaries of other saves, unless one is still being written
    if (t[i].path[0] && !pr_ck_alive_elsewhere(t[i].pid)) moved |= unlink(t[i].path) == 0;
  DIR *d = id[0] ? opendir(dir) : NULL; // shards of earlier saves that no index names
  for (struct dirent *de; d && (de = readdir(d));) {
    int half;
    char path[SH_PATH], have[SH_ID];
    if (!is_shard_name(de->d_name, &half)) continue;
    bool named = false;
    for (int h = 0; h < 2 && !named; h++)
      for (int f = 0; f < ix[h].nfile && !named; f++)
        named = strcmp(ix[h].file[f], de->d_name) == 0;
    snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
    // Only pipec's own shards (they carry a save id), never a file it did not write.
    if (!named && pr_safetensors_peek(path, "save_id", have, sizeof have) && have[0] &&
        strcmp(have, id) != 0)
      moved |= unlink(path) == 0;
  }
  if (d) closedir(d);
  index_free(&ix[0]);
  index_free(&ix[1]);
  free(t);
  if (moved) pr_fsync_dir_of(mpath);
}

// ---------------------------------------------------------------------------------------------
// Loading

// Loads refs (this rank's view: data NULL = checked, not read) from the shards the index names.
// A tensor missing from the index is an error unless optional (tied); a name of the index that
// is no tensor of refs is an error. id non-NULL: every shard read must carry that save id.
static void load_index(const char *dir, const char *ipath, Index *ix, PrTensorRef *refs, int n,
                       const bool *optional, const char *id, const char *what) {
  int *file_of = calloc((size_t)n + 1, sizeof *file_of);
  PrTensorRef *g = calloc((size_t)n + 1, sizeof *g);
  bool *gopt = calloc((size_t)n + 1, sizeof *gopt);
  prCheck(file_of && g && gopt, "the machine is out of memory", "cannot read '%s'", ipath);
  for (int i = 0; i < n; i++) {
    Entry *e = (Entry *)index_find(ix, refs[i].name);
    file_of[i] = -1;
    if (!e) {
      prCheck(optional && optional[i], HINT_SHARDS, "%s: no tensor '%s' in its weight_map", ipath,
              refs[i].name);
      continue;
    }
    e->used = true;
    const char **f = bsearch(&e->file, ix->file, (size_t)ix->nfile, sizeof *ix->file, str_cmp);
    file_of[i] = (int)(f - ix->file);
  }
  for (int k = 0; k < ix->n; k++)
    prCheck(ix->e[k].used, "load it into the model that wrote it",
            "%s: tensor '%s' (in %s) is not %s of this program", ipath, ix->e[k].name,
            ix->e[k].file, what);
  for (int f = 0; f < ix->nfile; f++) {
    int ng = 0;
    for (int i = 0; i < n; i++)
      if (file_of[i] == f) g[ng] = refs[i], gopt[ng++] = optional && optional[i];
    char path[SH_PATH], have[SH_ID];
    snprintf(path, sizeof path, "%s/%s", dir, ix->file[f]);
    if (id) {
      if (access(path, F_OK) != 0)
        pr_fail(__FILE__, __LINE__, HINT_SHARDS, "%s: its shard '%s' is missing", ipath, path);
      prCheck(pr_safetensors_meta(path, "save_id", have, sizeof have) && strcmp(have, id) == 0,
              HINT_SHARDS, "%s (save id %s) is not from the save of %s (save id %s)", path,
              have[0] ? have : "none", ipath, id);
    }
    pr_safetensors_load(path, g, ng, gopt, true);
  }
  free(file_of);
  free(g);
  free(gopt);
}

// The number N of the ranks that wrote dir's shards (model-R-of-N, ...), the same in every name
// both indexes give; 0 when a name is of another form.
static int shard_count(const Index *const ix[2]) {
  int n = -1, half;
  for (int h = 0; h < 2; h++)
    for (int f = 0; f < ix[h]->nfile; f++) {
      const char *name = ix[h]->file[f];
      if (!is_shard_name(name, &half) || half != h) return 0;
      int of = atoi(name + strlen(SH_PREFIX[h]) + 10), r = atoi(name + strlen(SH_PREFIX[h]) + 1);
      if ((n >= 0 && of != n) || r < 1 || r > of) return 0;
      n = of;
    }
  return n < 0 ? 0 : n;
}

// Recomputes the save id of dir's save (indexes m and o, step) from the shards they name, as
// pr_shards_save hashed each rank's tensors (a rank's shard that no index names held none):
// stops the program unless it is the indexes' id (a value changed on disk since the save).
static void verify_shards(const char *dir, const Index *m, const Index *o, int64_t step) {
  const Index *const ix[2] = {m, o};
  int nr = shard_count(ix);
  bool ok = nr > 0;
  uint64_t h = pr_ck_mix(pr_ck_mix(PR_CK_SEED, (uint64_t)step), (uint64_t)nr);
  for (int r = 0; ok && r < nr; r++) {
    uint64_t hr = PR_CK_SHARD;
    for (int half = 0; half < 2; half++) {
      char name[64], path[SH_PATH];
      const char *key = name;
      shard_name(name, sizeof name, half, r, nr);
      snprintf(path, sizeof path, "%s/%s", dir, name);
      if (half == SH_OPTIM) hr = pr_ck_mix(hr, PR_CK_OPTIM);
      if (bsearch(&key, ix[half]->file, (size_t)ix[half]->nfile, sizeof *ix[half]->file, str_cmp))
        ok = pr_safetensors_hash(path, &hr) && ok;
    }
    h = pr_ck_mix(pr_ck_mix(h, hr >> 32), hr & 0xffffffffu);
  }
  char got[SH_ID];
  snprintf(got, sizeof got, "%016llx", (unsigned long long)h);
  prCheck(ok && strcmp(got, m->id) == 0, PR_CK_CORRUPT,
          "a shard of %s is corrupt: the shards' values do not hash to their save id %s", dir,
          m->id);
}

static void check_vocab_all(const char *dir, const Index *ix, const PrCheckpoint *c) {
  for (int f = 0; c->vocab && f < ix->nfile; f++) {
    char path[SH_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, ix->file[f]);
    pr_ck_check_vocab(path, c);
  }
}

void pr_shards_init(const char *dir, const PrCheckpoint *c) {
  char ipath[SH_PATH];
  Index ix;
  index_path(ipath, dir, SH_MODEL);
  index_load(ipath, &ix);
  // A pipec save (its index has a save id): every shard must be of that save, as for --resume.
  load_index(dir, ipath, &ix, c->params, c->nparams, c->tied, ix.id[0] ? ix.id : NULL,
             "a parameter");
  check_vocab_all(dir, &ix, c);
  // The shards verify with the optimizer half of their save (the save id hashes both halves).
  char opath[SH_PATH], why[256];
  Index o;
  memset(&o, 0, sizeof o);
  index_path(opath, dir, SH_OPTIM);
  bool whole =
      c->verify && ix.id[0] && index_read(opath, &o, why, sizeof why) && strcmp(o.id, ix.id) == 0;
  for (int f = 0; whole && f < o.nfile; f++) {
    char path[SH_PATH];
    snprintf(path, sizeof path, "%s/%s", dir, o.file[f]);
    whole = access(path, F_OK) == 0;
  }
  if (whole) verify_shards(dir, &ix, &o, pr_ck_parse_step(ipath, ix.step));
  index_free(&o);
  index_free(&ix);
}

int64_t pr_shards_resume(const char *dir, const PrCheckpoint *c) {
  char mpath[SH_PATH], opath[SH_PATH];
  index_path(mpath, dir, SH_MODEL);
  index_path(opath, dir, SH_OPTIM);
  Index m, o;
  index_load(mpath, &m);
  prCheck(access(opath, F_OK) == 0,
          "--resume DIR needs both indexes (both are written by --save DIR/)",
          "%s: its optimizer state '%s' is missing", dir, opath);
  index_load(opath, &o);
  prCheck(m.id[0] && o.id[0], HINT_SHARDS,
          "%s has no save id: it was not written by --save of this version of pipec",
          m.id[0] ? opath : mpath);
  prCheck(strcmp(m.id, o.id) == 0, HINT_SHARDS,
          "%s (save id %s) and %s (save id %s) are not from the same save", mpath, m.id, opath,
          o.id);
  int64_t step = pr_ck_parse_step(opath, o.step);
  prCheck(pr_ck_parse_step(mpath, m.step) == step, HINT_SHARDS,
          "%s (step %s) and %s (step %s) have the same save id but different steps", mpath, m.step,
          opath, o.step);
  load_index(dir, mpath, &m, c->params, c->nparams, c->tied, m.id, "a parameter");
  load_index(dir, opath, &o, c->optim, c->noptim, NULL, m.id, "in the optimizer state");
  check_vocab_all(dir, &m, c);
  if (c->verify) verify_shards(dir, &m, &o, step);
  if (c->loss_scale)
    meta_str(cJSON_GetObjectItemCaseSensitive(o.root, "metadata"), "loss_scale", c->loss_scale,
             PR_SCALE_TEXT);
  index_free(&m);
  index_free(&o);
  return step;
}

bool pr_checkpoint_vocab(const char *path, char *out, size_t cap) {
  char dir[SH_PATH], ipath[SH_PATH], why[256];
  out[0] = '\0';
  if (!pr_shards_dir(path, true, dir, sizeof dir))
    return pr_safetensors_peek(path, "vocab", out, cap) && out[0];
  Index ix;
  index_path(ipath, dir, SH_MODEL);
  if (!index_read(ipath, &ix, why, sizeof why)) return false;
  meta_str(cJSON_GetObjectItemCaseSensitive(ix.root, "metadata"), "vocab", out, cap);
  index_free(&ix);
  return out[0] != '\0';
}

// ---------------------------------------------------------------------------------------------
// Saving

void pr_shards_check_writable(const char *dir) {
  const char *hint = "give a directory that exists or can be created, and is writable";
  struct stat st;
  if (stat(dir, &st) != 0) {
    prCheck(errno == ENOENT, hint, "--save '%s/': %s", dir, strerror(errno));
    prCheck(mkdir(dir, 0777) == 0 || errno == EEXIST, hint, "--save '%s/': cannot create it: %s",
            dir, strerror(errno));
    prCheck(stat(dir, &st) == 0, hint, "--save '%s/': %s", dir, strerror(errno));
  }
  prCheck(S_ISDIR(st.st_mode), hint, "--save '%s/': not a directory", dir);
  char probe[SH_PATH];
  prCheck(snprintf(probe, sizeof probe, "%s/model.safetensors.index.json.tmp.%ld", dir,
                   (long)getpid()) < (int)sizeof probe,
          "use a shorter path", "--save '%.200s/': the path is too long", dir);
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
  prCheck(fd >= 0, hint, "--save: cannot create files in '%s': %s", dir, strerror(errno));
  close(fd);
  unlink(probe);
}

// Writes text to path itself, fsync'ed: 0 or errno (path removed).
static int write_text(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  int err = pr_write_full(fd, text, strlen(text));
  if (!err && fsync(fd) != 0) err = errno;
  if (close(fd) != 0 && !err) err = errno;
  if (err) unlink(path);
  return err;
}

static int64_t numel(const PrTensorRef *r) {
  int64_t n = 1;
  for (int d = 0; d < r->rank; d++) n *= r->shape[d];
  return n;
}

// The index of one half: every tensor (owner[i]: the rank whose shard holds refs[i]).
static char *index_text(int half, const PrTensorRef *refs, const int *owner, int n, int nranks,
                        const char *const *meta, int nmeta) {
  cJSON *root = cJSON_CreateObject(), *md = cJSON_CreateObject(), *map = cJSON_CreateObject();
  prCheck(root && md && map, "the machine is out of memory", "cannot build a checkpoint index");
  int64_t total = 0;
  for (int i = 0; i < n; i++) total += numel(&refs[i]) * (int64_t)sizeof(float);
  cJSON_AddItemToObject(root, "metadata", md);
  cJSON_AddNumberToObject(md, "total_size", (double)total);
  for (int k = 0; k < nmeta; k++) cJSON_AddStringToObject(md, meta[2 * k], meta[2 * k + 1]);
  cJSON_AddItemToObject(root, "weight_map", map);
  for (int i = 0; i < n; i++) {
    char f[64];
    shard_name(f, sizeof f, half, owner ? owner[i] : 0, nranks);
    cJSON_AddStringToObject(map, refs[i].name, f);
  }
  char *text = cJSON_Print(root);
  prCheck(text != NULL, "the machine is out of memory", "cannot build a checkpoint index");
  cJSON_Delete(root);
  return text;
}

void pr_shards_save(const char *dir, const PrCheckpoint *c, const int *owner_p, const int *owner_o,
                    int64_t step, const PrComm *comm) {
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN); // EFBIG is reported, not a kill
  const int rank = comm ? comm->rank : 0, nr = comm ? comm->nranks : 1;
  const bool saver = !comm || rank == comm->save_rank;
  if (saver) pr_shards_recover(dir);
  // This rank's shards: the tensors it is home for, in canonical order.
  PrTensorRef *mine[2];
  int nmine[2] = {0, 0}, n[2] = {c->nparams, c->noptim};
  const PrTensorRef *all[2] = {c->params, c->optim};
  const int *owner[2] = {owner_p, owner_o};
  for (int h = 0; h < 2; h++) {
    mine[h] = calloc((size_t)n[h] + 1, sizeof *mine[h]);
    prCheck(mine[h] != NULL, "the machine is out of memory", "cannot build the checkpoint");
    for (int i = 0; i < n[h]; i++)
      if ((owner[h] ? owner[h][i] : 0) == rank) mine[h][nmine[h]++] = all[h][i];
  }
  uint64_t hr = pr_ck_hash_refs(PR_CK_SHARD, mine[0], nmine[0]);
  hr = pr_ck_hash_refs(pr_ck_mix(hr, PR_CK_OPTIM), mine[1], nmine[1]);
  // One all-gather: every rank's hash (two exact 32-bit halves) and the save rank's PID.
  double mine3[3] = {(double)(hr >> 32), (double)(hr & 0xffffffffu), (double)getpid()};
  double *got = calloc(3 * (size_t)nr, sizeof *got);
  prCheck(got != NULL, "the machine is out of memory", "cannot build the checkpoint");
  if (comm)
    comm->transport->allgather(mine3, got, 3);
  else
    memcpy(got, mine3, sizeof mine3);
  uint64_t h = pr_ck_mix(pr_ck_mix(PR_CK_SEED, (uint64_t)step), (uint64_t)nr);
  for (int r = 0; r < nr; r++)
    h = pr_ck_mix(pr_ck_mix(h, (uint64_t)got[3 * r]), (uint64_t)got[3 * r + 1]);
  long pid = (long)got[3 * (comm ? comm->save_rank : 0) + 2];
  char id[SH_ID], stepbuf[32], hex[2 * 256 + 1];
  snprintf(id, sizeof id, "%016llx", (unsigned long long)h);
  snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
  int nv = c->vocab ? c->nvocab : 0;
  pr_ck_vocab_hex(hex, c->vocab ? c->vocab : "", nv < 0 ? 0 : nv > 256 ? 256 : nv);
  const char *meta[8] = {"format", "pt", "save_id", id, "step", stepbuf, "vocab", hex};
  const char *ometa[8] = {"format", "pt",    "save_id",    id,
                          "step",   stepbuf, "loss_scale", c->loss_scale};
  const char *const *metas[2] = {meta, ometa};
  int nmeta[2] = {c->vocab ? 4 : 3, c->loss_scale ? 4 : 3};
  // (1) the shards as temporaries
  char tmp[2][SH_PATH], name[64];
  int err = 0, failed = 0;
  for (int hh = 0; hh < 2; hh++) {
    shard_name(name, sizeof name, hh, rank, nr);
    snprintf(tmp[hh], sizeof tmp[hh], "%s/%s.tmp.%ld", dir, name, pid);
    if (!err) err = pr_safetensors_write(tmp[hh], mine[hh], nmine[hh], metas[hh], nmeta[hh]);
    if (err && !failed) failed = hh + 1;
  }
  double e = err, *errs = got; // reuses got: nr >= 1 entries
  if (comm)
    comm->transport->allgather(&e, errs, 1);
  else
    errs[0] = e;
  int bad = -1;
  for (int r = 0; r < nr && bad < 0; r++)
    if (errs[r] != 0) bad = r;
  const char *hint = "check the free disk space, the file size limit (ulimit -f) and permissions";
  if (bad >= 0) {
    unlink(tmp[0]);
    unlink(tmp[1]);
    prCheck(bad != rank, hint,
            "cannot write '%s': %s (the previous checkpoint in '%s' is unchanged)",
            tmp[failed ? failed - 1 : 0], strerror(err), dir);
    pr_fail(__FILE__, __LINE__, hint,
            "rank %d could not write its shard (its error says why); the previous checkpoint in "
            "'%s' is unchanged",
            bad, dir);
  }
  // (2) the indexes as temporaries, then the commit; (3) everything else into place
  if (saver) {
    char ipath[2][SH_PATH], itmp[2][SH_PATH + 32];
    for (int hh = 0; hh < 2; hh++) {
      index_path(ipath[hh], dir, hh);
      snprintf(itmp[hh], sizeof itmp[hh], "%s.tmp.%ld", ipath[hh], pid);
      char *text = index_text(hh, all[hh], owner[hh], n[hh], nr, metas[hh] + 2, nmeta[hh] - 1);
      int werr = write_text(itmp[hh], text);
      free(text);
      if (werr) {
        unlink(itmp[0]);
        for (int r = 0; r < nr; r++)
          for (int k = 0; k < 2; k++) {
            char p[SH_PATH];
            shard_name(name, sizeof name, k, r, nr);
            snprintf(p, sizeof p, "%s/%s.tmp.%ld", dir, name, pid);
            unlink(p);
          }
        pr_fail(__FILE__, __LINE__, hint,
                "cannot write '%s': %s (the previous checkpoint in '%s' is unchanged)", itmp[hh],
                strerror(werr), dir);
      }
    }
    pr_fsync_dir_of(ipath[0]); // every temporary's name is durable before the commit
    prCheck(rename(itmp[SH_MODEL], ipath[SH_MODEL]) == 0, hint, "cannot rename '%s' to '%s': %s",
            itmp[SH_MODEL], ipath[SH_MODEL], strerror(errno));
    // Committed: what fails from here is completed by the next --resume or --save.
    pr_fsync_dir_of(ipath[0]);
    pr_shards_recover(dir);
  }
  if (comm) comm->transport->barrier(); // no rank goes on before the save is committed
  free(got);
  free(mine[0]);
  free(mine[1]);
  signal(SIGXFSZ, old_xfsz);
}
