// trainloop.c: what is the same in every generated program: its main() (pr_main). The program
// hands over a PrProgram: its plan (region sizes, the parameter table), its training defaults
// and a small table of generated functions (setup, fresh parameters, data, one training step, one
// evaluation batch, --gradcheck's pieces). The runtime then allocates the regions, resumes or
// initialises the parameters (checkpoint.c), runs the steps and the evaluations, and does the
// step end over the parameter table: the squared global gradient norm in canonical order, the
// non-finite check (train.c), clipping as torch.nn.utils.clip_grad_norm_, then AdamW or SGD per
// parameter (optim.c). It logs progress, the loss log and the median step time, saves at the end.
//
// In a pipeline job (PrProgram.comm set, S > 1 ranks) the same loop runs on every rank through
// the transport (pipeline.c): the step end's loss and norm come from one all-gather (the same
// bits as one rank's), every rank checks, clips and steps the parameters it holds; the report
// rank prints progress and evaluations, the save rank writes the loss log and the checkpoint
// (gathered from the home ranks into a staging buffer allocated before training); --init and
// --resume read on every rank what it holds. Every line is prefixed "[rank r] " (prefix.c).
// With --replicas D (PrComm.replicas) all of that runs within each replica's S ranks; before the
// step end each rank sums its gradients with its replicas' (replicas.c), and replica 0 alone
// reports and saves (r in the prefix is then the job's rank d * S + s).
//
// A device program (PrProgram.device set: the CUDA target) runs the same loop with its regions in
// device memory: the step end's norm (a device sum of squares per parameter, summed here in
// canonical order), checks, clipping and optimizer go through the device table over the device
// parameters; fresh parameters are initialised into a host mirror of the parameter region (the
// same per-name seeded values as the CPU's) and uploaded; --init, --resume and --save read and
// write the host mirrors of the parameter and optimizer regions, uploaded after a load and
// downloaded before a save. The mirrors are allocated before training.
//
// A --precision program (PrProgram.precision) has 16-bit copies of the parameters
// (PrParam.half), narrowed from the f32 master weights after init, load and every update
// (half.c); an fp16 one runs the loss scaler: the seed set before each step, a step whose norm is
// not finite skipped on every rank, the gradients unscaled through the optimizer's factor, the
// scaler's state saved and resumed with the optimizer state's metadata.
//
// The runtime knows no graph: every generated function is straight-line kernel calls. Everything
// this file allocates is allocated before the first step (no heap allocation inside a step).
#include "checkpoint_impl.h"
#include "pipeline.h"
#include "pipert.h"

#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

// Per-run state the step end reads: the gradients of the table as the step checks take them.
typedef struct Trainer {
  const PrProgram *p; // the program
  PrGrad *grads;      // per parameter: name, gradient (NULL: not trained here), elements
  PrPipe *pipe;       // a pipeline job's step end (NULL: one rank)
  PrReplicas *rep;    // --replicas D > 1: the replicas' gradient exchange (NULL: none)
  PrScaler *scaler;   // fp16 programs: the dynamic loss scale (NULL: none)
} Trainer;

// The end of a step (counting from 0) after the generated train_step: norm, checks, clipping,
// optimizer, over the parameter table in canonical order. Returns the step's loss (in a pipeline,
// the report rank's).
static double step_end(const Trainer *t, int64_t step, double loss, double lr) {
  const PrProgram *p = t->p;
  const PrOptimizer *o = &p->opt;
  const PrDevice *dv = p->device;
  if (dv) dv->check_status(); // an id outside the vocabulary found by a kernel this step
  // Squared global norm over all parameters, summed in canonical order; a non-finite loss or
  // norm stops the program before the update.
  pr_trace_begin(PR_TR_NORM, -1, -1);
  double norm2;
  if (t->pipe) {
    int bad;
    if (t->rep) loss = pr_replicas_combine(t->rep, loss); // the replicas' sums, in replica order
    pr_pipe_step_end(t->pipe, loss, &loss, &norm2, &bad);
    if (t->scaler && pr_scaler_skip(t->scaler, step, &norm2)) { // the same on every rank
      pr_trace_end();
      return loss;
    }
    if (!isfinite(loss) || !isfinite(norm2)) pr_pipe_await_abort(p->comm);
    pr_check_step_named(step + 1, loss, norm2, bad >= 0 ? p->params[bad].name : NULL);
  } else if (dv) { // a double sum of float squares cannot overflow: non-finite means a bad element
    int bad = -1;
    norm2 = 0;
    for (int i = 0; i < p->nparams; i++) {
      if (!t->grads[i].g) continue;
      double s = dv->sumsq(t->grads[i].g, t->grads[i].n);
      norm2 += s;
      if (!isfinite(s) && bad < 0) bad = i;
    }
    pr_check_step_named(step + 1, loss, norm2, bad >= 0 ? p->params[bad].name : NULL);
  } else {
    norm2 = pr_grad_norm2(t->grads, p->nparams);
    if (t->scaler && pr_scaler_skip(t->scaler, step, &norm2)) {
      pr_trace_end();
      return loss;
    }
    pr_check_step(step + 1, loss, norm2, t->grads, p->nparams);
  }
  // Clipping as torch.nn.utils.clip_grad_norm_ (g *= coef where coef < 1), applied by the
  // optimizer as it reads g (the same rounding, one pass less over the gradients).
  float gscale = 1.0f;
  if (o->grad_clip > 0) {
    double norm = sqrt(norm2), coef = o->grad_clip / (norm + 1e-6);
    if (coef < 1) gscale = (float)coef;
  }
  // fp16: the gradients are the scaled loss's; the optimizer reads them unscaled (a power of two:
  // exact) after the clip's coefficient, which norm2 (unscaled by pr_scaler_skip) gave.
  if (t->scaler) gscale *= (float)t->scaler->inv;
  pr_trace_end();
  pr_trace_begin(PR_TR_OPT, -1, -1);
  // The CPU's kernels, or their device twins (the same arguments).
  double t_opt = pr_now();
  // The optimizer's step counter (AdamW's bias correction, SGD's first momentum step) counts the
  // updates made: an fp16 step skipped for an overflow is not one (torch's GradScaler).
  int64_t upd = step + 1 - (t->scaler ? t->scaler->skipped_all : 0);
  // AdamW on the CPU: every tensor in one parallel region (the loop below then only narrows the
  // 16-bit copies).
  bool all = !dv && o->kind == PR_ADAMW;
  if (all)
    pr_adamw_params(p->params, p->nparams, gscale, lr, o->beta1, o->beta2, o->eps, o->weight_decay,
                    upd);
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->grad || !q->data) continue;
    double wd = q->decay ? o->weight_decay : 0.0;
    if (!all && o->kind == PR_ADAMW)
      (dv ? dv->adamw_step : pr_adamw_step)(q->data, q->grad, gscale, q->m, q->v, q->n, lr,
                                            o->beta1, o->beta2, o->eps, wd, upd);
    else if (!all)
      (dv ? dv->sgd_step : pr_sgd_step)(q->data, q->grad, gscale, q->m, q->n, lr, o->momentum, wd,
                                        upd);
    if (q->half) // --precision: the 16-bit copy the kernels read, from the new master weights
      (p->precision == PR_FP16 ? pr_f16_narrow : pr_bf16_narrow)(q->half, q->data, q->n);
  }
  pr_trace_end();
  pr_prof_opt(pr_now() - t_opt);
  return loss;
}

// Validation after step: the mean loss over the evaluation batches (weighted by each batch's
// real rows), and the accuracy where the program counts correct predictions; nothing (no line)
// without validation rows.
static void evaluate(const PrProgram *p, int64_t requested, int64_t step) {
  double loss = 0, weight = 0;
  int64_t correct = 0, seen = 0;
  int64_t batches = p->eval_batches(requested);
  if (batches == 0) return; // no validation split (a table's train_fraction 1): every rank alike
  if (p->comm && p->comm->stage_reps && pr_replica != 0)
    return; // the uneven form: replica 0 of each rank evaluates (the others hold the same bits)
  for (int64_t k = 0; k < batches; k++) {
    PrEvalBatch r = {0};
    p->eval_batch(k, requested == 0, &r); // in a pipeline: every rank, its stages' forward
    loss += r.loss * r.weight;
    weight += r.weight;
    correct += r.correct;
    seen += r.seen;
  }
  if (p->comm && p->comm->accuracy_rank >= 0) { // its counts, to the rank that prints them
    int64_t counts[2] = {correct, seen};
    p->comm->transport->gather(counts, sizeof counts, p->comm->accuracy_rank,
                               p->comm->report_rank);
    correct = counts[0], seen = counts[1];
  }
  if (p->comm && (p->comm->rank != p->comm->report_rank || pr_replica != 0))
    return; // only the loss's rank knows it (replica 0's speaks)
  pr_check_val_loss(step, loss / weight);
  printf("eval  step %lld | val loss %.4f", (long long)step, loss / weight);
  if (seen)
    printf(" | val accuracy %.2f%% (%lld/%lld)", 100.0 * (double)correct / (double)seen,
           (long long)correct, (long long)seen);
  printf("\n");
  fflush(stdout);
}

// prefix + name, carved from *buf (which advances past it).
static const char *state_name(char **buf, const char *prefix, const char *name) {
  char *s = *buf;
  size_t n = strlen(prefix), m = strlen(name);
  memcpy(s, prefix, n);
  memcpy(s + n, name, m + 1);
  *buf += n + m + 1;
  return s;
}

// What pr_main allocates for the whole run, reachable from here until it frees it: an error
// stops the program with pr_fail's exit(1) at any point, and this memory is then still in use,
// not leaked.
static struct {
  PrTensorRef *refs;         // checkpoint: every parameter
  PrTensorRef *orefs;        // checkpoint: the optimizer state
  bool *tied;                // checkpoint: per parameter, tied to an earlier one
  PrGrad *grads;             // the step checks' view of the gradients
  char *names;               // the optimizer state's names
  double *step_ms;           // step times
  int *oparam;               // pipeline: the parameter of each optimizer ref
  PrTensorRef *srefs;        // pipeline, --save: refs and orefs (the save rank's staged, save_refs)
  int *sparam;               // pipeline, --save: the parameter of each of srefs
  float *staging;            // pipeline, save rank: the staging buffer
  double *stats_prev;        // pipeline, --stats: every rank's snapshot at the last table
  PrPipe pipe;               // pipeline: the step end's state
  PrReplicas rep;            // --replicas: the replicas' gradient exchange (replicas.c)
  char *mirror[PR_NREGIONS]; // device programs: host mirrors of the params and optimizer regions
} held;

static void release(const PrProgram *p) {
  if (p->release_data) p->release_data();
  for (int r = 0; r < PR_NREGIONS; r++) {
    if (p->device)
      p->device->free_region(*p->region[r]);
    else
      pr_free_region(*p->region[r]);
    pr_free_region(held.mirror[r]);
    held.mirror[r] = NULL;
  }
  if (p->device) p->device->finish();
  pr_release_scratch();
}

// Device programs: where the host mirror holds what dev (in region r, or NULL) points at.
static float *host_of(const PrProgram *p, int r, float *dev) {
  if (!dev || !p->device) return dev;
  return (float *)(held.mirror[r] + ((char *)dev - *p->region[r]));
}

// Device programs: the parameter and optimizer regions to the device (after a load or a fresh
// initialisation) or back from it (before a save).
enum { MIRRORED_PARAMS = 0, MIRRORED_OPTIM = 2 }; // the regions with host mirrors
static void sync_state(const PrProgram *p, bool to_device) {
  static const int mirrored[2] = {MIRRORED_PARAMS, MIRRORED_OPTIM};
  for (int k = 0; k < 2; k++) {
    int r = mirrored[k];
    size_t bytes = (size_t)p->region_bytes[r];
    if (to_device)
      p->device->upload(*p->region[r], held.mirror[r], bytes);
    else
      p->device->download(held.mirror[r], *p->region[r], bytes);
  }
}

// Device programs: fresh parameters, each the CPU's pure function of (seed, name), computed by the
// generated init_params into the host mirror (the table points there while it runs).
static void init_on_host(const PrProgram *p, uint64_t seed) {
  for (int i = 0; i < p->nparams; i++)
    p->params[i].data = host_of(p, MIRRORED_PARAMS, p->params[i].data);
  p->init_params(seed);
  for (int i = 0; i < p->nparams; i++)
    if (p->params[i].data)
      p->params[i].data = (float *)(*p->region[MIRRORED_PARAMS] +
                                    ((char *)p->params[i].data - held.mirror[MIRRORED_PARAMS]));
}

static int64_t numel_of(const PrTensorRef *r) {
  int64_t n = 1;
  for (int d = 0; d < r->rank; d++) n *= r->shape[d];
  return n;
}

// A pipeline's save: the checkpoint's refs in file order (parameters, then optimizer state), each
// with its parameter (param_of); on the save rank every tensor it does not hold points into one
// staging buffer. Allocated before training.
static PrTensorRef *save_refs(const PrTensorRef *refs, int n, const PrTensorRef *orefs,
                              const int *oparam, int nopt, bool stage) {
  int total = n + nopt;
  int64_t floats = 0;
  PrTensorRef *s = held.srefs = calloc((size_t)total + 1, sizeof *s);
  int *pof = held.sparam = calloc((size_t)total + 1, sizeof *pof);
  prCheck(s && pof, "the machine is out of memory", "cannot allocate the checkpoint's table");
  for (int k = 0; k < total; k++) {
    s[k] = k < n ? refs[k] : orefs[k - n];
    pof[k] = k < n ? k : oparam[k - n];
    if (!s[k].data) floats += numel_of(&s[k]);
  }
  if (!stage) return s;
  float *buf = held.staging = pr_alloc_region("checkpoint staging", (size_t)floats * sizeof(float));
  for (int k = 0; k < total; k++)
    if (!s[k].data) s[k].data = buf, buf += numel_of(&s[k]);
  return s;
}

// What pr_main's parts share for one run: the options, the roles, the checkpoint's tables and
// where the steps got to. (The memory the parts allocate is in run, above, freed by free_run.)
typedef struct Session {
  const PrProgram *p;   // the program
  const PrComm *comm;   // its transport (NULL: one rank)
  const PrDevice *dv;   // its device (NULL: the CPU)
  PrOptions o;          // the command line over the model's defaults (args.c)
  int local;            // ranks of the job on this machine
  bool replicated;      // --replicas, either form
  bool reporter;        // this rank prints progress and evaluations
  bool saver;           // this rank writes the files (replica 0's save rank)
  const char *save_dir; // --save DIR/: the sharded checkpoint's directory
  const char *load_dir; // --init or --resume DIR/: likewise
  bool sharded_save;    // --save names a directory: every rank writes its own tensors
  bool sharded_load;    // --init or --resume names one
  Trainer t;            // what the step end reads
  PrCheckpoint ck;      // the checkpoint's view of the parameters and optimizer state
  int nopt;             // entries of ck.optim
  char *scale_text;     // fp16: the scaler's state in the checkpoint
  PrTensorRef *srefs;   // pipeline, --save: the save rank's view of the file (save_refs)
  int64_t start;        // the first step (--resume: the checkpoint's)
  int64_t done;         // steps run
  bool loss_log_bad;    // the loss log could not be written in full
} Session;

// The options: the defaults' paths resolved, the command line parsed (args.c), every line of
// the rank prefixed, errors naming it, from the first one on (--replicas: once the transport has
// started, when the job's rank is known).
static void parse_options(Session *s, int argc, char **argv) {
  const PrProgram *p = s->p;
  pr_start(argc, argv);
  s->comm = p->comm;
  s->local = 1;
  s->replicated = pr_comm_replicated(s->comm);
  if (s->comm && !s->replicated) {
    pr_rank = s->comm->rank;
    pr_prefix_start(s->comm->rank);
  }
  PrOptions *o = &s->o;
  *o = p->defaults;
  static char data_path[PATH_MAX + 1], file_path[PR_MAX_FEEDS][PATH_MAX + 1]; // the defaults
  static char weights_path[PATH_MAX + 1];                                     // resolved
  o->data = pr_origin_path(o->data, data_path, sizeof data_path);
  o->weights = pr_origin_path(o->weights, weights_path, sizeof weights_path);
  for (int k = 1; k < o->nfiles; k++)
    o->file[k] = pr_origin_path(o->file[k], file_path[k], sizeof file_path[k]);
  pr_parse_args(argc, argv, o, p->doc);
}

// A pipeline job: the transport started (the job's rank known from here), what it does not
// support refused, the ranks on this machine sharing its cores.
static void start_transport(Session *s, int argc, char **argv) {
  const PrComm *comm = s->comm;
  PrOptions *o = &s->o;
  prCheck(!o->gradcheck,
          "run --gradcheck on the one-stage program of the model (pipec compile without "
          "--stages): the gradients are the same",
          "--gradcheck works on one stage; this program is rank %d of a %d-stage pipeline",
          comm->rank, comm->nranks);
  s->local = comm->transport->start(comm, &argc, &argv, o->timeout);
  if (s->replicated) { // the job's rank: replica d's pipeline rank s is d * S + s
    pr_rank = pr_replica * comm->nranks + comm->rank;
    if (comm->stage_reps) { // uneven: stage by stage, D_0 + .. + D_{s-1} + r
      pr_rank = pr_replica;
      for (int r = 0; r < comm->rank; r++) pr_rank += comm->stage_reps[r];
    }
    pr_prefix_start(pr_rank);
    const char *what = o->trace ? "--trace" : o->predict ? "--predict" : "--profile";
    const char *hint = "run it without --replicas (the same model at D = 1)";
    bool unsupported = o->trace || o->predict || o->profile;
    prCheck(!unsupported || comm->stage_reps, hint,
            "%s is not supported yet with --replicas (this job has %d replicas)", what,
            comm->replicas);
    prCheck(!unsupported, hint,
            "%s is not supported yet with --replicas (the uneven form: this rank's stage runs "
            "on %d rank%s)",
            what, pr_comm_replicas(comm), pr_comm_replicas(comm) == 1 ? "" : "s");
  }
  if (!o->threads_given) { // the ranks on this machine share its cores
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    o->threads = cores / s->local > 1 ? (int)(cores / s->local) : 1;
  }
}

// The options against the program: roles, threads, and what this program cannot run.
static void check_options(Session *s) {
  const PrProgram *p = s->p;
  const PrOptions *o = &s->o;
  // Roles: one rank has the loss (progress, evaluation), one writes the files (replica 0's).
  s->reporter = !s->comm || (s->comm->rank == s->comm->report_rank && pr_replica == 0);
  s->saver = !s->comm || (s->comm->rank == s->comm->save_rank && pr_replica == 0);
  pr_set_threads(o->threads);
  s->dv = p->device;
  prCheck(!p->precision || !o->gradcheck,
          "run --gradcheck on the f32 program of the model (pipec compile without --precision): "
          "16-bit storage rounds every stored result",
          "--gradcheck needs f32 storage; this program was compiled with --precision %s",
          p->precision == PR_FP16 ? "fp16" : "bf16");
  prCheck(p->precision == PR_FP16 || !o->scaler_given,
          "drop the option, or compile with pipec compile --precision fp16",
          "--loss-scale and --loss-scale-window: only an fp16 program scales its loss (this one "
          "is %s)",
          p->precision == PR_BF16 ? "bf16" : "f32");
  prCheck(!s->dv || !o->gradcheck,
          "run --gradcheck on the CPU program of the model (pipec compile without --target): the "
          "gradients are the same",
          "--gradcheck runs on the CPU target only; this is a %s program",
          s->dv ? s->dv->name : "");
}

// The plan printed, the device (or the machine's memory) checked against it, the regions and
// the device's host mirrors allocated, the program's setup run.
static void setup_regions(const Session *s) {
  const PrProgram *p = s->p;
  const PrDevice *dv = s->dv;
  if (!s->o.quiet) fputs(p->plan, stdout);
  uint64_t plan_bytes = 0;
  for (int r = 0; r < PR_NREGIONS; r++) plan_bytes += (uint64_t)p->region_bytes[r];
  if (dv) { // the device, its memory against the plan and the pool, before any region
    size_t scratch = p->device_scratch ? p->device_scratch() : 0;
    dv->start(plan_bytes + scratch, scratch);
  } else {
    pr_check_plan_memory(plan_bytes);
  }
  static const char *const region_names[PR_NREGIONS] = {"params", "grads", "optimizer",
                                                        "activations"};
  for (int r = 0; r < PR_NREGIONS; r++)
    *p->region[r] = dv ? dv->alloc_region(region_names[r], (size_t)p->region_bytes[r])
                       : pr_alloc_region(region_names[r], (size_t)p->region_bytes[r]);
  if (dv) { // the host mirrors of the regions the checkpoints and the initialisation read
    held.mirror[MIRRORED_PARAMS] =
        pr_alloc_region("params (host mirror)", (size_t)p->region_bytes[MIRRORED_PARAMS]);
    held.mirror[MIRRORED_OPTIM] =
        pr_alloc_region("optimizer state (host mirror)", (size_t)p->region_bytes[MIRRORED_OPTIM]);
  }
  p->setup();
}

// Outputs are checked before any work: a run must not train for hours, then fail to save.
// A directory (--save DIR/) is a sharded checkpoint: every rank writes its own tensors. Then the
// data opened (--predict's instead of the training data).
static void check_outputs(Session *s) {
  const PrProgram *p = s->p;
  PrOptions *o = &s->o;
  static char save_dir[PATH_MAX + 1], load_dir[PATH_MAX + 1];
  const char *load = o->resume ? o->resume : o->init;
  s->sharded_save = o->save && pr_shards_dir(o->save, false, save_dir, sizeof save_dir);
  s->sharded_load = load && pr_shards_dir(load, true, load_dir, sizeof load_dir);
  s->save_dir = save_dir, s->load_dir = load_dir;
  if (o->save && s->saver) {
    if (s->sharded_save)
      pr_shards_check_writable(save_dir);
    else
      pr_checkpoint_check_writable(o->save);
  }
  if (o->loss_log && s->saver) pr_check_writable(o->loss_log, "--loss-log");
  if (o->predict) { // the whole of DATA, in order, instead of the training data
    pr_check_writable(o->out, "--out");
    pr_data_predict = true;
    o->data = o->predict;
    // Text: the characters' ids are the checkpoint's (its training text's vocabulary).
    char hex[2 * 256 + 1];
    const char *ck = o->resume ? o->resume : o->init;
    if (p->vocab && pr_checkpoint_vocab(ck, hex, sizeof hex))
      pr_data_predict_nvocab = pr_ck_vocab_parse(ck, hex, pr_data_predict_vocab);
    prCheck(!p->vocab || pr_data_predict_nvocab > 0,
            "--init a checkpoint saved by a pipec program (its metadata holds the characters)",
            "--predict: %s records no character vocabulary: the text's character ids are unknown",
            ck);
  }
  if (o->trace && s->saver) pr_check_writable(o->trace, "--trace");
  prCheck(!o->trace || !s->dv,
          "run --trace with the CPU program of the model (a device's times would be its launches)",
          "--trace works on the CPU target only for now");
  if (p->open_data) {
    prCheck(o->data != NULL, "pass --data FILE", "no training data");
    p->open_data(o);
  } else {
    prCheck(0, "add a training.data section to the model", "this model has no data binding");
  }
}

// The checkpoint's tables: parameters (tied ones share their owner's storage), optimizer state,
// vocabulary; what each parameter carries, from its home rank (the whole layout on every rank);
// the step end's view of the gradients.
static void setup_checkpoint(Session *s) {
  const PrProgram *p = s->p;
  const PrComm *comm = s->comm;
  if (comm) pr_pipe_start(&held.pipe, p);
  if (s->replicated) pr_replicas_start(&held.rep, p);
  int n = p->nparams;
  PrTensorRef *refs = held.refs = calloc((size_t)n + 1, sizeof *refs);
  PrTensorRef *orefs = held.orefs = calloc(2 * (size_t)n + 1, sizeof *orefs);
  int *oparam = held.oparam = calloc(2 * (size_t)n + 1, sizeof *oparam);
  bool *tied = held.tied = calloc((size_t)n + 1, sizeof *tied);
  static PrScaler scaler;
  Trainer *t = &s->t;
  *t = (Trainer){p, held.grads = calloc((size_t)n + 1, sizeof(PrGrad)), comm ? &held.pipe : NULL,
                 s->replicated ? &held.rep : NULL, p->precision == PR_FP16 ? &scaler : NULL};
  if (t->scaler)
    pr_scaler_start(t->scaler, p, s->o.loss_scale, s->o.scale_window, s->reporter && !s->o.quiet);
  prCheck(refs && orefs && oparam && tied && t->grads, "the machine is out of memory",
          "cannot allocate the parameter table");
  // The optimizer state's names ("m.NAME", "v.NAME") in one block.
  size_t bytes = 1;
  for (int i = 0; i < n; i++) bytes += 2 * (strlen(p->params[i].name) + 3);
  char *names = held.names = malloc(bytes);
  prCheck(names != NULL, "the machine is out of memory", "cannot allocate the parameter table");
  int nopt = 0;
  for (int i = 0; i < n; i++) {
    const PrParam *q = &p->params[i];
    refs[i] = (PrTensorRef){q->name, host_of(p, MIRRORED_PARAMS, q->data), q->rank, {0}};
    memcpy(refs[i].shape, q->shape, sizeof refs[i].shape);
    tied[i] = q->tied;
    t->grads[i] = (PrGrad){q->name, q->grad, q->n};
    unsigned char has = comm ? held.pipe.layout[i] : pr_pipe_flags(q);
    if (!(has & PR_PIPE_M)) continue;
    oparam[nopt] = i;
    orefs[nopt] = (PrTensorRef){
        state_name(&names, "m.", q->name), host_of(p, MIRRORED_OPTIM, q->m), q->rank, {0}};
    memcpy(orefs[nopt++].shape, q->shape, sizeof q->shape);
    if (has & PR_PIPE_V) {
      oparam[nopt] = i;
      orefs[nopt] = (PrTensorRef){
          state_name(&names, "v.", q->name), host_of(p, MIRRORED_OPTIM, q->v), q->rank, {0}};
      memcpy(orefs[nopt++].shape, q->shape, sizeof q->shape);
    }
  }
  static char scale_text[PR_SCALE_TEXT]; // fp16: the scaler's state in the checkpoint
  s->scale_text = scale_text, s->nopt = nopt;
  s->ck = (PrCheckpoint){.params = refs,
                         .tied = tied,
                         .nparams = n,
                         .optim = orefs,
                         .noptim = nopt,
                         .vocab = p->vocab,
                         .nvocab = p->nvocab ? *p->nvocab : 0,
                         .verify = s->saver,
                         .loss_scale = t->scaler ? scale_text : NULL};
  // The save rank's view of the file (staging for what other ranks hold) exists before training.
  s->srefs = comm && s->o.save && !s->sharded_save
                 ? save_refs(refs, n, orefs, oparam, nopt, s->saver)
                 : NULL;
}

// The parameters and optimizer state: resumed, initialised from a checkpoint, or fresh. One rank
// completes an interrupted save first (--resume, and --init of a directory, whose index may
// already name a save whose shards are still temporaries); then every rank reads it.
static void load_state(Session *s) {
  const PrProgram *p = s->p;
  const PrComm *comm = s->comm;
  const PrOptions *o = &s->o;
  s->start = 0;
  if (o->resume || s->sharded_load) {
    if (s->saver && s->sharded_load)
      pr_shards_recover(s->load_dir);
    else if (s->saver)
      pr_checkpoint_recover(o->resume);
    if (comm) comm->transport->barrier();
    if (s->replicated) comm->transport->world_barrier(); // replica 0's saver recovered it
  }
  if (o->resume) {
    s->start = s->sharded_load ? pr_shards_resume(s->load_dir, &s->ck)
                               : pr_checkpoint_resume(o->resume, &s->ck);
    if (s->t.scaler && s->scale_text[0]) pr_scaler_restore(s->t.scaler, s->scale_text, o->resume);
  } else if (o->init) {
    if (s->sharded_load)
      pr_shards_init(s->load_dir, &s->ck);
    else
      pr_checkpoint_init(o->init, &s->ck);
  } else if (s->dv) {
    init_on_host(p, o->seed);
  } else {
    p->init_params(o->seed);
  }
  if (p->precision) pr_params_narrow(p); // the kernels' 16-bit copies of what was loaded
  if (s->dv) sync_state(p, true);
}

// --stats: every rank's snapshot came with this step's end (up to its all-gather): the table of
// the interval since the last one.
static void print_stats(const Session *s, int64_t step, int64_t *stats_step) {
  const int sw = pr_pipe_width(&held.pipe), nr = s->comm->nranks;
  const int64_t start = s->start;
  double *stats_prev = held.stats_prev;
  const double *now = held.pipe.all + held.pipe.n + 2;
  char what[64];
  snprintf(what, sizeof what, "of steps %lld..%lld", (long long)*stats_step + 1,
           (long long)step + 1);
  pr_stats_print(stdout, what, step + 1 - *stats_step, nr, now, sw,
                 *stats_step > start ? stats_prev : NULL, PR_STAT_N);
  if (s->replicated)
    pr_replicas_stats_print(&held.rep, step + 1 - *stats_step, nr, now, sw,
                            *stats_step > start ? stats_prev : NULL, PR_STAT_N);
  for (int r = 0; r < nr; r++)
    memcpy(stats_prev + r * PR_STAT_N, now + (size_t)r * sw, sizeof(double) * PR_STAT_N);
  *stats_step = step + 1;
}

// Before the steps: a first step without its step end, results discarded, so that the steps
// allocate nothing (tests/alloc): kernel scratch, OpenBLAS and the OpenMP pool reach their sizes
// here. The steps overwrite every buffer it writes (microbatch 0 does not accumulate, the
// step-end sums overwrite); parameters and optimizer state are untouched, so no number changes.
// With --trace, the hooks count this step's events: the buffer of the traced steps is allocated
// here, before the loop (by default the 3 steps after the first of this run). Then what the
// loop writes into: the statistics' snapshots and the step timer. Returns the steps timed.
static int64_t warm_up(Session *s) {
  const PrProgram *p = s->p;
  const PrOptions *o = &s->o;
  pr_blas_report(o->quiet); // BLAS and kernel; warns of a slow one (blas_info.c)
  if (o->trace) {
    int64_t first = o->trace_first, end = o->trace_end;
    if (end == 0) first = o->steps - s->start > 1 ? s->start + 1 : s->start, end = first + 3;
    pr_trace_setup(o->trace, first, end, s->comm, s->local);
  }
  (void)p->train_step(s->start, o->seed);
  // Statistics from here (pipeline jobs): the snapshot of the last --stats table, per rank (and,
  // after it, of the whole run's table: 2 nr snapshots, allocated before the steps).
  const int nr = s->comm ? s->comm->nranks : 0;
  held.stats_prev = s->comm ? calloc(2 * (size_t)nr * PR_STAT_N + 1, sizeof(double)) : NULL;
  prCheck(!s->comm || held.stats_prev, "the machine is out of memory",
          "cannot allocate the statistics");
  pr_stats_reset();
  if (o->trace) pr_trace_ready();
  if (o->profile) pr_prof_begin(o->profile);
  // Step times of at most the first 2^20 steps (8 MiB): --steps may be up to 2^63 - 1.
  const int64_t timed = o->steps - s->start < (1 << 20) ? o->steps - s->start : (1 << 20);
  held.step_ms = calloc((size_t)(timed > 0 ? timed : 1), sizeof(double));
  prCheck(held.step_ms != NULL, "the machine is out of memory", "cannot allocate the step timer");
  return timed;
}

// The steps: train_step, the step end, the loss log, progress, --stats and the evaluations.
static void train_loop(Session *s) {
  const PrProgram *p = s->p;
  const PrOptions *o = &s->o;
  PrLrSchedule lrs = {o->lr, o->min_lr, p->warmup, p->decay_steps};
  FILE *loss_log = o->loss_log && s->saver ? fopen(o->loss_log, "w") : NULL;
  prCheck(!o->loss_log || !s->saver || loss_log, "check the directory exists and is writable",
          "cannot open %s", o->loss_log);
  const int64_t timed = warm_up(s), start = s->start;
  int64_t stats_step = start, done = 0;
  double t0 = pr_now();
  for (int64_t step = start; step < o->steps; step++) {
    double ts = pr_now(), lr = pr_lr_at(&lrs, step);
    if (o->trace) pr_trace_step(step);
    if (s->replicated) pr_replicas_begin(&held.rep); // the exchange's receives; train_step sends
    if (s->t.scaler) pr_scaler_seed(s->t.scaler);
    double loss = p->train_step(step, o->seed);
    loss = step_end(&s->t, step, loss, lr);
    if (o->trace) pr_trace_step_done();
    if (done < timed) held.step_ms[done] = (pr_now() - ts) * 1e3;
    pr_prof_step(pr_now() - ts);
    done++;
    if (loss_log) fprintf(loss_log, "%lld %.9g\n", (long long)step, loss);
    if (!o->quiet && s->reporter &&
        ((step + 1) % o->log_every == 0 || step + 1 == o->steps || step == start)) {
      double el = pr_now() - t0;
      pr_log_step(step + 1, o->steps, loss, lr, (double)done * p->items_per_step / el, p->item_unit,
                  el, el / (double)done * (double)(o->steps - step - 1));
    }
    if (o->stats && s->comm && s->reporter && (step + 1) % o->log_every == 0)
      print_stats(s, step, &stats_step);
    if ((o->eval_every && (step + 1) % o->eval_every == 0) || step + 1 == o->steps) {
      PrStats keep = pr_stats; // evaluation is not training: out of the statistics
      double te = pr_now();
      evaluate(p, o->eval_batches, step + 1);
      pr_stats = keep;
      pr_stats.t0 += pr_now() - te;
    }
  }
  s->done = done;
  // A loss log that could not be written in full (disk full) fails the run, after the save.
  if (loss_log) {
    s->loss_log_bad = ferror(loss_log) != 0;
    s->loss_log_bad = (fclose(loss_log) != 0) || s->loss_log_bad;
  }
  if (!o->quiet && s->reporter && done > 10) { // the median step after a warm-up of 5 steps
    int64_t n = done < timed ? done : timed;   // (eval excluded)
    printf("median step time %.2f ms over %lld steps\n", pr_median(held.step_ms + 5, n - 5),
           (long long)(n - 5));
  }
  free(held.step_ms);
  held.step_ms = NULL;
}

// After the steps: the whole run's statistics, exact to the last step's end (collective), and
// the trace's events to the save rank, which writes the file.
static void finish_stats(const Session *s) {
  const PrComm *comm = s->comm;
  if (comm) {
    const int nr = comm->nranks;
    double mine[PR_STAT_N], *all = held.stats_prev + (size_t)nr * PR_STAT_N;
    pr_stats_snapshot(mine);
    pr_job_allgather(comm->transport, mine, all, PR_STAT_N);
    if (!s->o.quiet && s->reporter && s->done > 0) {
      pr_stats_print(stdout, "of the run", s->done, nr, all, PR_STAT_N, NULL, 0);
      if (s->replicated) pr_replicas_stats_print(&held.rep, s->done, nr, all, PR_STAT_N, NULL, 0);
    }
  }
  free(held.stats_prev);
  held.stats_prev = NULL;
  if (s->o.trace) pr_trace_finish();
  if (s->t.scaler) pr_scaler_text(s->t.scaler, s->scale_text);
}

// --save: replica 0 saves (the replicas hold the same bits); a directory's shards each from its
// home rank, or one file written by the save rank, with every tensor it lacks from its home rank.
static void save_outputs(Session *s) {
  const PrProgram *p = s->p;
  const PrComm *comm = s->comm;
  const PrOptions *o = &s->o;
  int n = p->nparams, nopt = s->nopt;
  if (!o->save || pr_replica != 0) return;
  if (s->dv) sync_state(p, false);
  if (s->sharded_save) { // each tensor in its home rank's shard
    int *owner = comm ? calloc((size_t)(n + nopt) + 1, sizeof *owner) : NULL;
    prCheck(!comm || owner, "the machine is out of memory", "cannot build the checkpoint");
    for (int k = 0; comm && k < n + nopt; k++)
      owner[k] = p->params[k < n ? k : held.oparam[k - n]].home;
    pr_shards_save(s->save_dir, &s->ck, owner, owner ? owner + n : NULL, s->start + s->done, comm);
    free(owner);
    if (!o->quiet && s->saver)
      printf("saved %s/ (%d shards and model.safetensors.index.json, optimizer state beside)\n",
             s->save_dir, comm ? comm->nranks : 1);
  }
  // Every tensor the save rank lacks comes from its home rank, in file order.
  if (comm && !s->sharded_save) pr_pipe_transfer(&held.pipe, s->srefs, held.sparam, n + nopt);
  if (s->saver && !s->sharded_save) {
    PrCheckpoint sck = s->ck;
    if (s->srefs) sck.params = s->srefs, sck.optim = s->srefs + n;
    pr_checkpoint_save(o->save, &sck, s->start + s->done);
    if (!o->quiet) printf("saved %s (and its optimizer state %s.optim)\n", o->save, o->save);
  }
}

// Everything the run allocated, and the regions.
static void free_run(const Session *s) {
  free(held.names);
  free(held.refs);
  free(held.orefs);
  free(held.oparam);
  free(held.tied);
  free(held.grads);
  free(held.srefs);
  free(held.sparam);
  pr_free_region(held.staging);
  if (s->comm) pr_pipe_free(&held.pipe);
  if (s->replicated) pr_replicas_free(&held.rep);
  held.names = NULL, held.refs = held.orefs = held.srefs = NULL, held.tied = NULL, held.grads = NULL;
  held.oparam = held.sparam = NULL, held.staging = NULL;
  release(s->p);
}

int pr_main(const PrProgram *p, int argc, char **argv) {
  Session s = {.p = p};
  parse_options(&s, argc, argv);
  if (s.comm) start_transport(&s, argc, argv);
  check_options(&s);
  setup_regions(&s);
  if (s.o.gradcheck) {
    int rc = pr_gradcheck_program(p, &s.o);
    release(p);
    return rc;
  }
  check_outputs(&s);
  setup_checkpoint(&s);
  load_state(&s);
  int rc = 0;
  if (s.o.predict) { // inference instead of training (predict.c)
    rc = pr_predict(p, &s.o);
    if (s.comm) s.comm->transport->finish();
  } else {
    train_loop(&s);
    finish_stats(&s);
    save_outputs(&s);
    prCheck(!s.loss_log_bad, "check that the disk has room (the log is incomplete)",
            "--loss-log: writing '%s' failed", s.o.loss_log);
    if (!s.o.quiet) printf("peak RSS %.1f MiB\n", (double)pr_peak_rss_bytes() / (1 << 20));
    if (s.o.profile) pr_prof_finish(s.comm);
    if (s.comm) s.comm->transport->finish(); // after the save: the others wait for it here
  }
  free_run(&s);
  return rc;
}
