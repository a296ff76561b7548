// checkpoint.c: a checkpoint is a pair of safetensors files saved and resumed as one unit.
//
// F holds the parameters (PyTorch state-dict names) with metadata "save_id", "step" and, for
// text data, "vocab" (the character vocabulary, two hex digits per byte); F.optim holds the
// optimizer state with metadata "save_id" and "step". The save id is a 64-bit hash of the step
// and of every saved value (16 hex digits): the same state always writes the same bytes, and two
// files belong to the same save exactly when their ids are equal.
//
// Save (pr_checkpoint_save): (0) recover, below, so that an interrupted earlier save is
// completed first; (1) write F.tmp.PID and F.optim.tmp.PID completely, each fsync'ed; on any
// failure (disk full, file size limit) remove both and stop: the old pair is untouched; (2)
// rename F.optim.tmp.PID over F.optim, then F.tmp.PID over F, with an fsync of the directory
// before, between and after the renames. A process killed at any moment leaves the old pair
// (perhaps beside complete or partial temporaries) or, between the two renames, the new F.optim
// beside the old F and the complete new F.tmp.PID.
// Recovery (before every resume and save): when F and F.optim have different ids, or one of them
// is missing or damaged, roll forward: a complete F.tmp.* whose id is F.optim's replaces F; else
// a complete F.optim.tmp.* whose id is F's replaces F.optim; else, with neither file present, a
// complete pair of temporaries with equal ids becomes the pair. Every F.tmp.* and F.optim.tmp.*
// left is then an orphan and is removed, except those of another process that is still running
// (a concurrent save). --resume refuses a pair that stays inconsistent, naming both files and
// both ids; --init reads F alone and needs no id. In a pipeline job only the save rank recovers,
// before a barrier, and then every rank reads the tensors it holds (refs with data NULL are
// skipped, their names and shapes still checked). Both refuse a vocabulary that differs from the
// data's (the character ids would shift).
// Verification (PrCheckpoint.verify: one rank of a job, the save rank): after its load, the rank
// reads both files again and recomputes the save id from their contents (pr_safetensors_hash, in
// the order the save wrote the tensors); a different id is bit rot, refused naming the pair (the
// id hashes both files as one: which one changed is unknown). --resume always verifies; --init
// when F has a save id and F.optim beside it carries the same (else F loads unverified).
#define _FILE_OFFSET_BITS 64
#include "checkpoint_impl.h"
#include "pipert.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define PATH_CAP 4096
#define ID_CAP   32
#define MAX_STEP PR_CK_MAX_STEP

static const char *HINT_PAIR =
    "resume from a pair written by one --save (F and F.optim together), or start from the "
    "parameters alone with --init F";

// The optimizer file's path: F.optim.
static void optim_path(char *out, const char *f) {
  prCheck(snprintf(out, PATH_CAP, "%s.optim", f) < PATH_CAP, "use a shorter path",
          "checkpoint path too long: '%.200s...'", f);
}

// ---------------------------------------------------------------------------------------------
// The save id

uint64_t pr_ck_hash_refs(uint64_t h, const PrTensorRef *r, int n) {
  for (int i = 0; i < n; i++) {
    int64_t numel = 1;
    for (int d = 0; d < r[i].rank; d++) numel *= r[i].shape[d];
    h = pr_ck_mix(h, pr_hash_name(r[i].name));
    h = pr_ck_mix(h, (uint64_t)numel);
    h = pr_ck_hash_values(h, r[i].data, numel);
  }
  return h;
}

static void save_id(char *out, const PrCheckpoint *c, int64_t step) {
  uint64_t h = pr_ck_mix(PR_CK_SEED, (uint64_t)step);
  h = pr_ck_hash_refs(h, c->params, c->nparams);
  h = pr_ck_hash_refs(pr_ck_mix(h, PR_CK_OPTIM), c->optim, c->noptim);
  snprintf(out, ID_CAP, "%016llx", (unsigned long long)h);
}

// Recomputes the save id of the pair (f, o) at step from the files' contents, as save_id hashed
// what it wrote: stops the program unless it is id (a value changed on disk since the save).
static void verify_pair(const char *f, const char *o, int64_t step, const char *id) {
  uint64_t h = pr_ck_mix(PR_CK_SEED, (uint64_t)step);
  bool ok = pr_safetensors_hash(f, &h);
  h = pr_ck_mix(h, PR_CK_OPTIM);
  ok = pr_safetensors_hash(o, &h) && ok;
  char got[ID_CAP];
  snprintf(got, sizeof got, "%016llx", (unsigned long long)h);
  prCheck(ok && strcmp(got, id) == 0, PR_CK_CORRUPT,
          "%s or %s is corrupt: their values do not hash to their save id %s", f, o, id);
}

// ---------------------------------------------------------------------------------------------
// Recovery

typedef struct Member {
  char path[PATH_CAP]; // the file
  char id[ID_CAP];     // its save id ("" when it has none)
  bool valid;          // a complete safetensors file
  long pid;            // temporaries: the PID that wrote it
  bool keep;           // temporaries: not an orphan
} Member;

typedef struct Temps {
  Member *m; // temporaries found
  int n;     // how many
} Temps;

static void peek(Member *m) {
  m->valid = pr_safetensors_peek(m->path, "save_id", m->id, sizeof m->id);
}

// The temporaries NAME.tmp.DIGITS of file f (a path) in its directory.
static Temps list_temps(const char *f) {
  Temps t = {NULL, 0};
  char dcopy[PATH_CAP], bcopy[PATH_CAP], prefix[PATH_CAP];
  snprintf(dcopy, sizeof dcopy, "%s", f);
  snprintf(bcopy, sizeof bcopy, "%s", f);
  const char *dir = dirname(dcopy), *base = basename(bcopy);
  snprintf(prefix, sizeof prefix, "%s.tmp.", base);
  size_t plen = strlen(prefix);
  DIR *d = opendir(dir);
  if (!d) return t;
  for (struct dirent *de; (de = readdir(d));) {
    const char *name = de->d_name;
    if (strncmp(name, prefix, plen) != 0 || !name[plen]) continue;
    const char *p = name + plen;
    while (*p >= '0' && *p <= '9') p++;
    if (*p || p - (name + plen) > 9) continue;
    Member *grown = realloc(t.m, (size_t)(t.n + 1) * sizeof *t.m);
    prCheck(grown != NULL, "out of memory", "out of memory listing '%s'", dir);
    t.m = grown;
    Member *m = &t.m[t.n++];
    memset(m, 0, sizeof *m);
    snprintf(m->path, sizeof m->path, "%s/%s", dir, name);
    m->pid = strtol(name + plen, NULL, 10);
    peek(m);
  }
  closedir(d);
  return t;
}

// The complete temporary with save id `id`, or NULL.
static Member *find_temp(Temps *t, const char *id) {
  for (int i = 0; id[0] && i < t->n; i++)
    if (t->m[i].valid && strcmp(t->m[i].id, id) == 0) return &t->m[i];
  return NULL;
}

static bool roll_forward(Member *tmp, Member *dst) {
  if (rename(tmp->path, dst->path) != 0) return false;
  tmp->keep = true;
  memcpy(dst->id, tmp->id, sizeof dst->id);
  dst->valid = true;
  return true;
}

// Another running process (a save in progress there).
bool pr_ck_alive_elsewhere(long pid) {
  if (pid <= 0 || pid == (long)getpid()) return false;
  return kill((pid_t)pid, 0) == 0 || errno == EPERM;
}

// Completes an interrupted save of the pair (f, o) and removes orphaned temporaries (see the top
// of the file). Never stops the program: what stays inconsistent is for the caller to refuse.
static void recover(const char *f, const char *o) {
  Member P, O;
  memset(&P, 0, sizeof P);
  memset(&O, 0, sizeof O);
  snprintf(P.path, sizeof P.path, "%s", f);
  snprintf(O.path, sizeof O.path, "%s", o);
  peek(&P);
  peek(&O);
  Temps tp = list_temps(f), to = list_temps(o);
  bool moved = false;
  if (!(P.valid && O.valid && P.id[0] && strcmp(P.id, O.id) == 0)) {
    Member *m;
    if (O.valid && (m = find_temp(&tp, O.id))) {
      moved = roll_forward(m, &P);
    } else if (P.valid && (m = find_temp(&to, P.id))) {
      moved = roll_forward(m, &O);
    } else if (access(f, F_OK) != 0 && access(o, F_OK) != 0) {
      for (int i = 0; !moved && i < tp.n; i++) {
        Member *q = tp.m[i].valid ? find_temp(&to, tp.m[i].id) : NULL;
        if (q && roll_forward(q, &O)) moved = roll_forward(&tp.m[i], &P);
      }
    }
  }
  Temps *all[2] = {&tp, &to};
  for (int k = 0; k < 2; k++) {
    for (int i = 0; i < all[k]->n; i++)
      if (!all[k]->m[i].keep && !pr_ck_alive_elsewhere(all[k]->m[i].pid)) unlink(all[k]->m[i].path);
    free(all[k]->m);
  }
  if (moved || tp.n || to.n) pr_fsync_dir_of(f);
}

// ---------------------------------------------------------------------------------------------
// Metadata: step and vocabulary

// A step: decimal digits only, at most MAX_STEP.
int64_t pr_ck_parse_step(const char *file, const char *s) {
  bool ok = s[0] != '\0';
  int64_t v = 0;
  for (const char *p = s; ok && *p; p++) {
    ok = *p >= '0' && *p <= '9' && v <= (MAX_STEP - (*p - '0')) / 10;
    if (ok) v = v * 10 + (*p - '0');
  }
  prCheck(ok, "the file is damaged or was not written by --save of a pipec program",
          "%s: metadata 'step' is '%.40s'%s; expected a step count, decimal digits from 0 to %lld",
          file, s, strlen(s) > 40 ? "..." : "", (long long)MAX_STEP);
  return v;
}

void pr_ck_vocab_hex(char *out, const char *v, int n) {
  for (int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", (unsigned char)v[i]);
  out[2 * n] = '\0';
}

// "'a' 'b' 0x0a" for up to 12 bytes of set (a 256-entry membership table) that are not in other.
static void fmt_only(char *out, size_t cap, const bool *set, const bool *other) {
  size_t k = 0;
  int shown = 0, more = 0;
  out[0] = '\0';
  for (int c = 0; c < 256; c++) {
    if (!set[c] || other[c]) continue;
    if (shown == 12) {
      more++;
      continue;
    }
    if (c > 0x20 && c < 0x7f && c != '\'')
      k += (size_t)snprintf(out + k, cap - k, "%s'%c'", shown ? " " : "", c);
    else
      k += (size_t)snprintf(out + k, cap - k, "%s0x%02x", shown ? " " : "", c);
    shown++;
  }
  if (more) snprintf(out + k, cap - k, " and %d more", more);
  if (!shown) snprintf(out, cap, "none");
}

// The file's "vocab" (when it has one) against the data's character vocabulary.
int pr_ck_vocab_parse(const char *path, const char *hex, char *chars) {
  size_t len = strlen(hex);
  bool ok = len % 2 == 0 && len <= 2 * 256;
  int n = 0, prev = -1;
  for (size_t i = 0; ok && i < len; i += 2) {
    unsigned v;
    ok = sscanf(hex + i, "%2x", &v) == 1 && (int)v > prev;
    if (ok) chars[n++] = (char)v, prev = (int)v;
  }
  prCheck(ok, "the file is damaged or was not written by --save of a pipec program",
          "%s: metadata 'vocab' is not a sorted list of hex bytes", path);
  return n;
}

void pr_ck_check_vocab(const char *path, const PrCheckpoint *c) {
  if (!c->vocab) return;
  char hex[600];
  if (!pr_safetensors_meta(path, "vocab", hex, sizeof hex)) return; // a file from elsewhere
  char chars[256];
  bool in_file[256] = {false}, in_data[256] = {false};
  int nfile = pr_ck_vocab_parse(path, hex, chars);
  for (int i = 0; i < nfile; i++) in_file[(unsigned char)chars[i]] = true;
  for (int i = 0; i < c->nvocab; i++) in_data[(unsigned char)c->vocab[i]] = true;
  bool same = nfile == c->nvocab;
  for (int b = 0; same && b < 256; b++) same = in_file[b] == in_data[b];
  if (same) return;
  char a[200], b[200];
  fmt_only(a, sizeof a, in_file, in_data);
  fmt_only(b, sizeof b, in_data, in_file);
  pr_fail(__FILE__, __LINE__,
          "train on the text the checkpoint was trained on (every character id would shift), or "
          "start from scratch",
          "%s: the checkpoint's vocabulary (%d characters) differs from the data's (%d): only in "
          "the checkpoint: %s; only in the data: %s",
          path, nfile, c->nvocab, a, b);
}

// ---------------------------------------------------------------------------------------------
// The API

void pr_checkpoint_check_writable(const char *path) {
  char o[PATH_CAP], probe[PATH_CAP + 32];
  optim_path(o, path);
  pr_check_writable(path, "--save"); // the directory, the file's kind, room for the suffix
  pr_check_writable(o, "--save");
  snprintf(probe, sizeof probe, "%s.tmp.%ld", path, (long)getpid());
  int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
  prCheck(fd >= 0, "check that the directory exists and is writable",
          "--save: cannot create files beside '%s': %s", path, strerror(errno));
  close(fd);
  unlink(probe);
}

void pr_checkpoint_recover(const char *path) {
  char o[PATH_CAP];
  optim_path(o, path);
  recover(path, o);
}

void pr_checkpoint_init(const char *path, const PrCheckpoint *c) {
  pr_safetensors_load(path, c->params, c->nparams, c->tied, false);
  pr_ck_check_vocab(path, c);
  // F verifies with the F.optim of its save beside it (the save id hashes both files).
  char o[PATH_CAP], id[ID_CAP], oid[ID_CAP], step[64];
  struct stat st;
  optim_path(o, path);
  if (c->verify && pr_safetensors_peek(path, "save_id", id, sizeof id) && id[0] &&
      stat(o, &st) == 0 && S_ISREG(st.st_mode) &&
      pr_safetensors_peek(o, "save_id", oid, sizeof oid) && strcmp(id, oid) == 0) {
    prCheck(pr_safetensors_meta(path, "step", step, sizeof step), HINT_PAIR,
            "%s: no 'step' in its metadata", path);
    verify_pair(path, o, pr_ck_parse_step(path, step), id);
  }
}

int64_t pr_checkpoint_resume(const char *path, const PrCheckpoint *c) {
  char o[PATH_CAP], pid[ID_CAP], oid[ID_CAP], pstep[64], ostep[64];
  optim_path(o, path);
  if (access(path, F_OK) == 0) pr_check_regular(path, "checkpoint"); // a FIFO would block
  prCheck(access(path, F_OK) == 0, "check the checkpoint path", "cannot open '%s': %s", path,
          strerror(errno));
  prCheck(access(o, F_OK) == 0, "--resume F needs F.optim beside F (both are written by --save F)",
          "%s: its optimizer state '%s' is missing", path, o);
  bool has_p = pr_safetensors_meta(path, "save_id", pid, sizeof pid);
  bool has_o = pr_safetensors_meta(o, "save_id", oid, sizeof oid);
  prCheck(has_p && has_o, HINT_PAIR,
          "%s has no save id: it was not written by --save of this "
          "version of pipec",
          has_p ? o : path);
  prCheck(strcmp(pid, oid) == 0, HINT_PAIR,
          "%s (save id %s) and %s (save id %s) are not from the same save", path, pid, o, oid);
  prCheck(pr_safetensors_meta(o, "step", ostep, sizeof ostep), HINT_PAIR,
          "%s: no 'step' in its metadata", o);
  int64_t step = pr_ck_parse_step(o, ostep);
  prCheck(pr_safetensors_meta(path, "step", pstep, sizeof pstep), HINT_PAIR,
          "%s: no 'step' in its metadata", path);
  prCheck(pr_ck_parse_step(path, pstep) == step, HINT_PAIR,
          "%s (step %s) and %s (step %s) have the same save id but different steps", path, pstep, o,
          ostep);
  pr_safetensors_load(path, c->params, c->nparams, c->tied, false);
  pr_safetensors_load(o, c->optim, c->noptim, NULL, false);
  pr_ck_check_vocab(path, c);
  if (c->verify) verify_pair(path, o, step, pid);
  if (c->loss_scale && !pr_safetensors_meta(o, "loss_scale", c->loss_scale, PR_SCALE_TEXT))
    c->loss_scale[0] = '\0';
  return step;
}

void pr_checkpoint_save(const char *path, const PrCheckpoint *c, int64_t step) {
  // Past a file size limit, writes fail with EFBIG (reported below) instead of killing us.
  void (*old_xfsz)(int) = signal(SIGXFSZ, SIG_IGN);
  char o[PATH_CAP], tp[PATH_CAP + 32], to[PATH_CAP + 32];
  optim_path(o, path);
  recover(path, o);
  char id[ID_CAP], stepbuf[32], hex[2 * 256 + 1];
  save_id(id, c, step);
  snprintf(stepbuf, sizeof stepbuf, "%lld", (long long)step);
  int nv = c->vocab ? c->nvocab : 0;
  pr_ck_vocab_hex(hex, c->vocab ? c->vocab : "", nv < 0 ? 0 : nv > 256 ? 256 : nv);
  const char *meta[6] = {"save_id", id, "step", stepbuf, "vocab", hex};
  const char *ometa[6] = {"save_id", id, "step", stepbuf, "loss_scale", c->loss_scale};
  snprintf(tp, sizeof tp, "%s.tmp.%ld", path, (long)getpid());
  snprintf(to, sizeof to, "%s.tmp.%ld", o, (long)getpid());
  const char *hint = "check the free disk space, the file size limit (ulimit -f) and permissions";
  int err = pr_safetensors_write(tp, c->params, c->nparams, meta, c->vocab ? 3 : 2);
  prCheck(err == 0, hint, "cannot write '%s': %s (the previous checkpoint '%s' is unchanged)", tp,
          strerror(err), path);
  err = pr_safetensors_write(to, c->optim, c->noptim, ometa, c->loss_scale ? 3 : 2);
  if (err) unlink(tp);
  prCheck(err == 0, hint, "cannot write '%s': %s (the previous checkpoint '%s' is unchanged)", to,
          strerror(err), path);
  pr_fsync_dir_of(path); // the temporaries' names are durable before the first rename
  if (rename(to, o) != 0) {
    err = errno;
    unlink(tp);
    unlink(to);
    pr_fail(__FILE__, __LINE__, hint, "cannot rename '%s' to '%s': %s", to, o, strerror(err));
  }
  // From here the new pair is complete on disk: a failure leaves it for recovery to finish.
  pr_fsync_dir_of(path); // F.optim's rename is durable before F's
  prCheck(rename(tp, path) == 0, "the next --resume or --save of this path completes the save",
          "cannot rename '%s' to '%s': %s", tp, path, strerror(errno));
  pr_fsync_dir_of(path);
  signal(SIGXFSZ, old_xfsz);
}
