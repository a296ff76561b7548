// The fuzzers' driver loop (harness.h): options, seeds, the loop over mutants with its tally by
// stage, the saved mutants, and the crash and hang reports. A crash is reported from a signal
// handler, or under the sanitizers from their death callback (their own SIGSEGV handler must stay
// in place to print the report); either writes the mutant with write(2) only.
#define _GNU_SOURCE
#include "harness.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define FUZZ_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define FUZZ_SANITIZED 1
#endif
#endif
#ifdef FUZZ_SANITIZED
#include <sanitizer/common_interface_defs.h>
#include <sanitizer/lsan_interface.h>
#endif

typedef struct Options {
  long iters;      // mutants to run
  uint64_t seed;   // the run's seed
  double seconds;  // stop after this long (0: no limit)
  int timeout;     // seconds one mutant may take before it counts as a hang
  long one;        // run only this mutant (-1: all)
  long from;       // the first mutant of the run (--from: a long run resumed)
  const char *out; // where mutants are saved
  bool leak_check; // --leak-check: LeakSanitizer after every mutant (sanitizer builds)
} Options;

// ---- crashes and hangs

static const FuzzCase *crash_case;  // the mutant running now
static long crash_index;            // its index
static char crash_path[4096];       // where a crash saves it
static const char *crash_name = ""; // the target's name

static void put(const char *s) {
  ssize_t r = write(2, s, strlen(s));
  (void)r;
}

static void put_long(long v) {
  char b[32], *p = b + sizeof b - 1;
  *p = '\0';
  bool neg = v < 0;
  unsigned long u = neg ? -(unsigned long)v : (unsigned long)v;
  do *--p = (char)('0' + u % 10), u /= 10;
  while (u);
  if (neg) *--p = '-';
  put(p);
}

// Saves the running mutant to crash_path and says which it is (async-signal-safe).
static void save_crash(const char *how) {
  if (!crash_case) return;
  const FuzzCase *c = crash_case;
  crash_case = NULL; // once
  int fd = open(crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd >= 0) {
    for (size_t o = 0; o < c->input.n;) {
      ssize_t w = write(fd, c->input.p + o, c->input.n - o);
      if (w <= 0) break;
      o += (size_t)w;
    }
    close(fd);
  }
  put(crash_name), put(": mutant "), put_long(crash_index), put(" ("), put(c->what), put(") ");
  put(how), put("; saved to "), put(crash_path), put("\n");
}

static void on_signal(int sig) {
  save_crash(sig == SIGALRM ? "hung (past --timeout)" : "crashed");
  if (sig == SIGALRM) _exit(1);
  signal(sig, SIG_DFL);
  raise(sig);
}

#ifdef FUZZ_SANITIZED
static void on_death(void) {
  save_crash("failed under the sanitizers (report above)");
}

// UndefinedBehaviorSanitizer has its own runtime beside ASan's, which never calls the death
// callback: its errors abort instead (SIGABRT, caught below), with a stack trace.
const char *__ubsan_default_options(void);
const char *__ubsan_default_options(void) {
  return "abort_on_error=1:print_stacktrace=1";
}
#endif

static void install_handlers(void) {
  signal(SIGALRM, on_signal);
#ifdef FUZZ_SANITIZED
  __sanitizer_set_death_callback(on_death);
  signal(SIGABRT, on_signal); // (ASan leaves SIGABRT alone)
#else
  int sigs[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};
  for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) signal(sigs[i], on_signal);
#endif
}

// ---- seeds

static int by_path(const void *a, const void *b) {
  return strcmp(((const Seed *)a)->path, ((const Seed *)b)->path);
}

static bool read_seed(Seeds *s, const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "fuzz: cannot read the seed %s: %s\n", path, strerror(errno));
    return false;
  }
  Seed *grown = realloc(s->s, (size_t)(s->n + 1) * sizeof *grown);
  if (!grown) exit(2);
  s->s = grown;
  Seed *seed = &s->s[s->n++];
  *seed = (Seed){.path = strdup(path)};
  char chunk[65536];
  size_t n;
  while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
    buf_insert(&seed->data, seed->data.n, chunk, n);
  fclose(f);
  return true;
}

static bool ends_with(const char *s, const char *tail) {
  size_t n = strlen(s), t = strlen(tail);
  return n >= t && !strcmp(s + n - t, tail);
}

// path: a seed file, or a directory whose files ending in ext are seeds.
static bool add_seeds(Seeds *s, const char *path, const char *ext) {
  struct stat st;
  if (stat(path, &st) != 0) {
    fprintf(stderr, "fuzz: no seed %s: %s\n", path, strerror(errno));
    return false;
  }
  if (!S_ISDIR(st.st_mode)) return read_seed(s, path);
  DIR *d = opendir(path);
  if (!d) return false;
  bool ok = true;
  for (struct dirent *e; ok && (e = readdir(d));) {
    if (!ends_with(e->d_name, ext)) continue;
    char *p = NULL;
    if (asprintf(&p, "%s/%s", path, e->d_name) < 0) exit(2);
    ok = read_seed(s, p);
    free(p);
  }
  closedir(d);
  return ok;
}

const Seed *fuzz_pick(Rng *r, const Seeds *seeds) {
  return &seeds->s[rng_below(r, (uint64_t)seeds->n)];
}

// ---- the diagnostics' checks

static bool digits(const char **p) {
  const char *s = *p;
  long v = 0;
  while (*s >= '0' && *s <= '9' && v < 1000000000) v = v * 10 + (*s++ - '0');
  bool ok = s > *p && v >= 1;
  *p = s;
  return ok;
}

// One line (without its '\n'): its kind in *kind ("error", "warning", "note"), or false.
static bool check_line(const char *line, size_t len, const char *file, const char **kind) {
  for (size_t i = 0; i < len; i++) {
    unsigned char c = (unsigned char)line[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f) return false;
  }
  const char *p = line, *end = line + len;
  size_t fl = strlen(file);
  const char *rest;
  if (len > 13 && !strncmp(line, "pipec: note: ", 13)) {
    *kind = "note";
    return len > 13;
  }
  const char *py = memmem(line, len, ".py:", 4);
  if (len >= fl + 1 && !strncmp(p, file, fl) && p[fl] == ':') {
    p += fl + 1;
    if (*p >= '0' && *p <= '9') { // LINE:COL:
      if (!digits(&p) || *p++ != ':' || !digits(&p) || *p++ != ':') return false;
    }
  } else if (py && py > line && !memchr(line, ':', (size_t)(py - line))) {
    p = py + 4; // a .pt2 node's Python line: PY:LINE: (no column)
    if (!digits(&p) || *p++ != ':') return false;
  } else
    return false;
  if (!strncmp(p, " error: ", 8))
    *kind = "error", rest = p + 8;
  else if (!strncmp(p, " warning: ", 10))
    *kind = "warning", rest = p + 10;
  else
    return false;
  return rest < end && *rest != ' ';
}

bool fuzz_check_diag(const char *text, const char *file, int errors, bool rejected, bool one_error,
                     char *why, size_t cap) {
  if (rejected && errors == 0) {
    snprintf(why, cap, "rejected without reporting an error (output: \"%.200s\")", text);
    return false;
  }
  if (!rejected && errors > 0) {
    snprintf(why, cap, "accepted after reporting %d error(s): %.300s", errors, text);
    return false;
  }
  size_t n = strlen(text);
  if (n && text[n - 1] != '\n') {
    snprintf(why, cap, "the diagnostics do not end with a line break: %.300s", text);
    return false;
  }
  int lines = 0, error_lines = 0;
  for (const char *l = text; *l;) {
    const char *e = strchr(l, '\n');
    const char *kind = NULL;
    if (!check_line(l, (size_t)(e - l), file, &kind)) {
      snprintf(why, cap, "line %d of the diagnostics is not one whole message: \"%.*s\"", lines + 1,
               (int)(e - l > 400 ? 400 : e - l), l);
      return false;
    }
    if (!strcmp(kind, "error")) error_lines++;
    if (!strcmp(kind, "error") && error_lines == 1 && lines > 0 && one_error) {
      snprintf(why, cap, "the first error is not the first line: %.300s", text);
      return false;
    }
    lines++;
    l = e + 1;
  }
  if (rejected && !error_lines) {
    snprintf(why, cap, "rejected: %d error(s) counted, no error line: %.300s", errors, text);
    return false;
  }
  if (rejected && one_error && lines != 1) {
    snprintf(why, cap, "rejected with %d lines, not one: %.600s", lines, text);
    return false;
  }
  return true;
}

// The checks themselves, on texts whose verdict is known: a fuzzer whose oracle accepts anything
// passes whatever the compiler does. False (the run stops) when one gives the wrong verdict.
static bool self_test(void) {
  static const struct {
    const char *text;
    int errors;
    bool rejected, one_error, ok;
  } cases[] = {
      {"m.json:3:7: error: nodes[0]: unknown op 'x'\n", 1, true, false, true},
      {"m.json: error: training: x\nm.json:2:1: warning: w\npipec: note: n\n", 1, true, false,
       true},
      {"", 0, false, false, true},
      {"m.json:1:2: warning: unused\n", 0, false, false, true},
      {"", 0, true, false, false},                                        // rejected silently
      {"m.json: error: x\n", 1, false, false, false},                     // accepted with an error
      {"m.json:3:7: error: unknown key 'a\nb'\n", 2, true, false, false}, // a message in two
      {"m.json:3:7: error: 'a\x1b'\n", 1, true, false, false},            // a control byte
      {"m.json:0:7: error: x\n", 1, true, false, false},                  // line 0
      {"other.json: error: x\n", 1, true, false, false},                  // another file
      {"m.json: error: \n", 1, true, false, false},                       // an empty message
      {"m.json: error: x", 1, true, false, false},                        // no line break
      {"m.json: error: x\nm.json: error: y\n", 2, true, true, false},     // one_error: two lines
  };
  char why[512];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    if (fuzz_check_diag(cases[i].text, "m.json", cases[i].errors, cases[i].rejected,
                        cases[i].one_error, why, sizeof why) != cases[i].ok) {
      fprintf(stderr, "fuzz: self-test %zu: the diagnostics check gave the wrong verdict (%s)\n", i,
              cases[i].ok ? why : "accepted");
      return false;
    }
  return true;
}

// ---- options

static bool parse_num(const char *s, double lo, double hi, double *v) {
  char *end;
  errno = 0;
  *v = strtod(s, &end);
  return s[0] && !*end && !errno && *v >= lo && *v <= hi;
}

static int usage(const FuzzTarget *t) {
  fprintf(stderr,
          "usage: %s [--iters N] [--seed S] [--seconds T] [--timeout T] [--one I] [--out DIR] "
          "[--from I] [--leak-check] [-v] SEED...\n"
          "(PIPEC_FUZZ_ITERS, PIPEC_FUZZ_SEED, PIPEC_FUZZ_SECONDS override the options)\n",
          t->name);
  return 2;
}

// The value of option a (argv[*i]) or of its environment variable, which wins.
static bool option(int argc, char **argv, int *i, const char *env, double lo, double hi,
                   double *v) {
  if (*i + 1 >= argc || !parse_num(argv[++*i], lo, hi, v)) return false;
  const char *e = env ? getenv(env) : NULL;
  return !e || !*e || parse_num(e, lo, hi, v);
}

static int parse_options(int argc, char **argv, const FuzzTarget *t, Options *o, Seeds *seeds,
                         bool *verbose) {
  const char *tmp = getenv("TMPDIR");
  *o = (Options){
      .iters = 1000, .seed = 1, .timeout = 10, .one = -1, .out = tmp && *tmp ? tmp : "/tmp"};
  double v;
  const char *env_iters = getenv("PIPEC_FUZZ_ITERS"), *env_seed = getenv("PIPEC_FUZZ_SEED");
  const char *env_secs = getenv("PIPEC_FUZZ_SECONDS");
  if (env_iters && parse_num(env_iters, 0, 1e12, &v)) o->iters = (long)v;
  if (env_seed && parse_num(env_seed, 0, 1e18, &v)) o->seed = (uint64_t)v;
  if (env_secs && parse_num(env_secs, 0, 1e9, &v)) o->seconds = v;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    if (!strcmp(a, "--iters") && option(argc, argv, &i, "PIPEC_FUZZ_ITERS", 0, 1e12, &v))
      o->iters = (long)v;
    else if (!strcmp(a, "--seed") && option(argc, argv, &i, "PIPEC_FUZZ_SEED", 0, 1e18, &v))
      o->seed = (uint64_t)v;
    else if (!strcmp(a, "--seconds") && option(argc, argv, &i, "PIPEC_FUZZ_SECONDS", 0, 1e9, &v))
      o->seconds = v;
    else if (!strcmp(a, "--timeout") && option(argc, argv, &i, NULL, 1, 3600, &v))
      o->timeout = (int)v;
    else if (!strcmp(a, "--from") && option(argc, argv, &i, NULL, 0, 1e12, &v))
      o->from = (long)v;
    else if (!strcmp(a, "--one") && option(argc, argv, &i, NULL, 0, 1e12, &v))
      o->one = (long)v, *verbose = true;
    else if (!strcmp(a, "--out") && i + 1 < argc)
      o->out = argv[++i];
    else if (!strcmp(a, "--leak-check"))
      o->leak_check = true;
    else if (!strcmp(a, "-v"))
      *verbose = true;
    else if (a[0] == '-')
      return usage(t);
    else if (!add_seeds(seeds, a, t->ext))
      return 2;
  }
  if (!seeds->n) {
    fprintf(stderr, "%s: no seeds (*%s) given\n", t->name, t->ext);
    return usage(t);
  }
  qsort(seeds->s, (size_t)seeds->n, sizeof *seeds->s, by_path);
  return 0;
}

// ---- the loop

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void save_mutant(const FuzzTarget *t, const Options *o, long i, const FuzzCase *c,
                        char *path, size_t cap) {
  snprintf(path, cap, "%s/%s-%llu-%ld%s", o->out, t->name, (unsigned long long)o->seed, i, t->ext);
  FILE *f = fopen(path, "wb");
  if (!f || fwrite(c->input.p, 1, c->input.n, f) != c->input.n) snprintf(path, cap, "(not saved)");
  if (f) fclose(f);
}

// Makes and runs mutant i; true when its checks held.
static bool run_one(const FuzzTarget *t, const Options *o, const Seeds *seeds, long i, FuzzCase *c,
                    long *tally) {
  Rng r;
  rng_seed(&r, o->seed, (uint64_t)i);
  c->input.n = 0;
  c->knob = 0;
  c->what[0] = c->why[0] = '\0';
  crash_case = c, crash_index = i; // (a crash while making it too: the harness's own bug)
  t->mutate(&r, seeds, c);
  alarm((unsigned)o->timeout);
  int stage = t->run(c);
  alarm(0);
  crash_case = NULL;
  if (stage >= 0 && stage < t->nstages) tally[stage]++;
#ifdef FUZZ_SANITIZED
  // LeakSanitizer reports a leak again at every later check: only the first mutant is named.
  static bool leaked;
  if (o->leak_check && !leaked && (leaked = __lsan_do_recoverable_leak_check()) && !c->why[0])
    snprintf(c->why, sizeof c->why,
             "leaked memory (LeakSanitizer's report above; later mutants "
             "are not checked)");
#endif
  if (!c->why[0] && o->one < 0) return true;
  char path[4096];
  save_mutant(t, o, i, c, path, sizeof path);
  if (c->why[0])
    fprintf(stderr,
            "%s: FAIL mutant %ld (%s): %s\n  saved to %s; rerun: %s --seed %llu --one %ld "
            "SEEDS...\n",
            t->name, i, c->what, c->why, path, t->name, (unsigned long long)o->seed, i);
  else
    fprintf(stderr, "%s: mutant %ld (%s): stopped at %s; saved to %s\n", t->name, i, c->what,
            stage >= 0 && stage < t->nstages ? t->stages[stage] : "?", path);
  return !c->why[0];
}

static void summary(const FuzzTarget *t, const Options *o, long ran, long failed, int nseeds,
                    const long *tally, double secs) {
  printf("%s: %ld mutants (seed %llu) of %d seeds in %.1f s, %ld failed; stopped at:", t->name, ran,
         (unsigned long long)o->seed, nseeds, secs, failed);
  for (int k = 0; k < t->nstages; k++)
    printf(" %s %ld%s", t->stages[k], tally[k], k + 1 < t->nstages ? "," : "\n");
  if (ran < o->iters - o->from && o->one < 0)
    printf("%s: stopped by --seconds %.0f after %ld of %ld mutants\n", t->name, o->seconds, ran,
           o->iters);
}

int fuzz_main(int argc, char **argv, const FuzzTarget *t) {
  Options o;
  Seeds seeds = {0};
  FuzzCase c = {0};
  int rc = self_test() ? parse_options(argc, argv, t, &o, &seeds, &c.verbose) : 2;
  for (int i = 0; !rc && t->load && i < seeds.n; i++)
    if (!t->load(&seeds.s[i])) rc = 2;
  if (!rc) {
    crash_name = t->name;
    snprintf(crash_path, sizeof crash_path, "%s/%s-crash%s", o.out, t->name, t->ext);
    install_handlers();
    long *tally = calloc((size_t)t->nstages, sizeof *tally), ran = 0, failed = 0;
    double t0 = now();
    long first = o.one >= 0 ? o.one : o.from, last = o.one >= 0 ? o.one + 1 : o.iters;
    for (long i = first; i < last; i++, ran++) {
      if (o.one < 0 && o.seconds > 0 && now() - t0 > o.seconds) break;
      if (!run_one(t, &o, &seeds, i, &c, tally)) failed++;
      if (o.one < 0 && o.iters >= 20000 && (i + 1) % (o.iters / 10) == 0)
        fprintf(stderr, "%s: %ld of %ld, %ld failed, %.0f s\n", t->name, i + 1, o.iters, failed,
                now() - t0);
    }
    summary(t, &o, ran, failed, seeds.n, tally, now() - t0);
    free(tally);
    rc = failed ? 1 : 0;
  }
  for (int i = 0; i < seeds.n; i++) {
    if (t->unload) t->unload(&seeds.s[i]);
    buf_free(&seeds.s[i].data);
    free((char *)seeds.s[i].path);
  }
  free(seeds.s);
  buf_free(&c.input);
  return rc;
}
