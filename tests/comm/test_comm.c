// test_comm.c: a hand-written pipeline "rank program" (no compiler involved) that drives the
// runtime's communication (comm.h, libpipert_mpi.a) and the training loop at S > 1 under mpirun.
// tests/comm/run.sh runs it; the rank and the job size, which a generated program has as
// constants, come from the environment here (TEST_COMM_RANK, else mpirun's OMPI_COMM_WORLD_RANK;
// TEST_COMM_RANKS, default 1: no communication at all). TEST_COMM_MODE picks what it does:
//   messages  several streams between neighbours, every microbatch of 3 steps, receives posted
//             before the sends, sends in descending microbatch order, waits in ascending order:
//             every message arrives whole in its own buffer ("messages ok"); also prints a line
//             from an OpenMP thread, stderr lines and a last line without a newline.
//   progress  MPI's progress while a rank computes (pr_comm_progress): rank 1 posts the receive
//             of a 1 MiB message (a rendezvous over shared memory: it completes only once rank 1
//             is inside MPI) and computes, calling pr_comm_progress between pieces of work, never
//             a wait; rank 0 sends it, waits for the send, then sends a 4-byte "done" that rank 1
//             sees land in its buffer while still computing. So rank 0's wait completed before
//             rank 1 waited for anything. Rank 1's later waits return the data whole; 3 steps
//             (the requests are reused after a completion by progress). "progress ok".
//   norm      the step end's all-gather (pipeline.c) on a table whose parameters live on
//             different ranks: the squared norm equals pr_grad_norm2 over the whole table, bit
//             for bit ("norm ok 0x...").
//   watchdog  rank 1 waits for a message rank 0 never sends (--timeout from argv[1]).
//   deadlock  each rank waits for a message the other never sends (--timeout from argv[1]):
//             both answer the watchdog's probe (whom they wait for).
//   fail      rank 1 fails a prCheck while rank 0 waits for it (the job must go at once).
//   stop      rank 1 stops (SIGSTOP) while rank 0 waits for it (rank 0's watchdog ends the job).
//   kill      rank 1 dies of SIGKILL while rank 0 waits for it (mpirun ends the job).
//   train     pr_main over a toy model (five parameters, one tied, one held by two ranks,
//             AdamW with clipping): the loss log and --save file must be byte-identical at any
//             S, and --resume / --init work across S. TEST_COMM_NAN_STEP makes a gradient NaN.
#include "pipeline.h"
#include "pipert.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int env_int(const char *name, int dflt) {
  const char *s = getenv(name);
  return s && *s ? atoi(s) : dflt;
}

static int my_rank(void) {
  const char *s = getenv("TEST_COMM_RANK");
  if (!s || !*s) s = getenv("OMPI_COMM_WORLD_RANK");
  return s && *s ? atoi(s) : 0;
}

// ---------------------------------------------------------------------------------------------
// messages: streams k = 0..2 from rank r to r + 1 (tags 10k + r) and one back (tag 90 + r)

enum { MSG_M = 4, MSG_STREAMS = 4, MSG_FLOATS = 1000 };

static float msg_value(int tag, int step, int m, int i) {
  return (float)(tag * 100000 + step * 1000 + m * 100) + (float)i * 0.5f;
}

static int run_messages(int rank, int nranks) {
  // Streams of this rank: sends to rank + 1 (3 forward, tags 10k + rank) and from rank + 1 (one
  // backward, tag 90 + rank); receives from rank - 1 likewise.
  static PrChannel ch[2 * MSG_STREAMS];
  static float buf[2 * MSG_STREAMS][MSG_M][MSG_FLOATS];
  static char names[2 * MSG_STREAMS][32];
  int nch = 0;
  for (int side = 0; side < 2; side++) {
    int peer = side == 0 ? rank + 1 : rank - 1;
    if (peer < 0 || peer >= nranks) continue;
    int low = side == 0 ? rank : peer; // the link's lower rank names its tags
    for (int k = 0; k < MSG_STREAMS; k++) {
      bool forward = k < 3;
      snprintf(names[nch], sizeof names[nch], "%s%d@%d", forward ? "h" : "dh", k, low);
      // The lower rank sends forward streams; the upper sends the backward one.
      ch[nch] = (PrChannel){names[nch], peer, forward ? 10 * k + low : 90 + low,
                            (int64_t)(MSG_FLOATS - 100 * k) * (int64_t)sizeof(float),
                            (side == 0) == forward};
      nch++;
    }
  }
  PrComm c = {rank, nranks, nranks - 1, 0, ch,  nch, MSG_M, &pr_transport_mpi,
              1,    NULL,   NULL,       0, NULL, -1};
  int argc = 1;
  char *args[] = {"test_comm", NULL}, **argv = args;
  pr_transport_mpi.start(&c, &argc, &argv, 30);
  for (int step = 0; step < 3; step++) {
    for (int k = 0; k < nch; k++)
      if (!ch[k].send)
        for (int m = 0; m < MSG_M; m++) {
          memset(buf[k][m], 0xff, sizeof buf[k][m]);
          pr_comm_post_recv(k, m, buf[k][m]);
        }
    for (int m = MSG_M - 1; m >= 0; m--)
      for (int k = 0; k < nch; k++) {
        if (!ch[k].send) continue;
        pr_comm_wait_send(k, m); // the previous step's message m is out: the buffer is free
        for (int i = 0; i < MSG_FLOATS; i++) buf[k][m][i] = msg_value(ch[k].tag, step, m, i);
        pr_comm_send(k, m, buf[k][m]);
      }
    for (int k = 0; k < nch; k++)
      if (!ch[k].send)
        for (int m = 0; m < MSG_M; m++) {
          char action[32];
          snprintf(action, sizeof action, "F(v%d, m%d)", rank, m);
          pr_comm_wait_recv(k, m, action);
          int64_t n = ch[k].bytes / (int64_t)sizeof(float);
          for (int64_t i = 0; i < MSG_FLOATS; i++) {
            float want = i < n ? msg_value(ch[k].tag, step, m, (int)i) : 0;
            uint32_t got;
            memcpy(&got, &buf[k][m][i], 4);
            prCheck(i < n ? buf[k][m][i] == want : got == 0xffffffffu, "the transport is broken",
                    "step %d: stream '%s' microbatch %d element %lld is %g, expected %g%s", step,
                    ch[k].tensor, m, (long long)i, (double)buf[k][m][i], (double)want,
                    i < n ? "" : " (past the message: untouched)");
          }
        }
  }
  pr_comm_wait_sends();
  printf("messages ok: %d streams x %d microbatches x 3 steps\nsecond line\n", nch, MSG_M);
#pragma omp parallel num_threads(2)
  {
#pragma omp critical
    {
      if (omp_get_thread_num() == 1) {
        printf("from an OpenMP thread\n");
        fflush(stdout);
      }
    }
  }
  fprintf(stderr, "a line on stderr\n");
  pr_transport_mpi.finish();
  printf("the last line has no newline");
  return 0;
}

// ---------------------------------------------------------------------------------------------
// progress: stream 0 carries `big` from rank 0 to rank 1, stream 1 `done` back the same way

enum { PROG_FLOATS = 1 << 18 }; // 1 MiB: far above Open MPI's eager limit over shared memory

static int run_progress(int rank) {
  static PrChannel ch[2];
  static float big[PROG_FLOATS];
  static volatile int32_t done; // written by MPI when the "done" message lands
  ch[0] = (PrChannel){"big", 1 - rank, 1, (int64_t)sizeof big, rank == 0};
  ch[1] = (PrChannel){"done", 1 - rank, 2, 4, rank == 0};
  PrComm c = {rank, 2, 1, 0, ch, 2, 1, &pr_transport_mpi, 1, NULL, NULL, 0, NULL, -1};
  int argc = 1;
  char *args[] = {"test_comm", NULL}, **argv = args;
  pr_transport_mpi.start(&c, &argc, &argv, 30);
  for (int step = 0; step < 3; step++) {
    if (rank == 0) {
      for (int i = 0; i < PROG_FLOATS; i++) big[i] = (float)(step * PROG_FLOATS + i);
      pr_comm_send(0, 0, big);
      pr_comm_wait_send(0, 0); // completes only while rank 1 is inside MPI
      static int32_t one = 1;
      pr_comm_send(1, 0, &one);
      pr_comm_wait_send(1, 0);
    } else {
      memset(big, 0, sizeof big);
      done = 0;
      pr_comm_post_recv(0, 0, big);
      pr_comm_post_recv(1, 0, (void *)&done);
      // "Compute" with progress between pieces of work, as a generated F/B/W does, until the
      // "done" message (sent only after rank 0's wait for `big` ended) has landed.
      double t0 = pr_now(), x = 1;
      long pieces = 0;
      while (done == 0) {
        for (int i = 0; i < 20000; i++) x = x * 1.0000001 + 1e-9;
        pr_comm_progress();
        pieces++;
        prCheck(pr_now() - t0 < 10, "pr_comm_progress does not move messages",
                "step %d: rank 0's send did not complete in 10 s of compute with progress (%ld "
                "pieces of work)",
                step, pieces);
      }
      pr_comm_wait_recv(1, 0, "progress");
      pr_comm_wait_recv(0, 0, "progress");
      for (int i = 0; i < PROG_FLOATS; i++)
        prCheck(big[i] == (float)(step * PROG_FLOATS + i), "the transport is broken",
                "step %d: element %d of the message is %g, expected %g", step, i, (double)big[i],
                (double)(step * PROG_FLOATS + i));
      printf("progress ok: step %d (%s)\n", step, x > 0 ? "computed" : "?");
    }
  }
  pr_transport_mpi.finish();
  return 0;
}

// ---------------------------------------------------------------------------------------------
// The toy model of norm and train: five parameters in canonical order.
//   0 "emb.weight"  (6, 4)  held by rank 0
//   1 "mid.weight"  (5, 3)  held by rank 1 % S
//   2 "mid.bias"    (5)     held by rank 2 % S
//   3 "shared"      (3, 2)  held by rank 0 and rank S - 1 (a weight used on two stages)
//   4 "head.weight" (6, 4)  tied to emb.weight (on rank 0)

enum { NP = 5 };
static const char *const pname[NP] = {"emb.weight", "mid.weight", "mid.bias", "shared",
                                      "head.weight"};
static const int prank[NP] = {2, 2, 1, 2, 2};
static const int64_t pshape[NP][2] = {{6, 4}, {5, 3}, {5, 0}, {3, 2}, {6, 4}};
static int64_t pnum(int i) {
  return pshape[i][0] * (prank[i] == 2 ? pshape[i][1] : 1);
}

static int S, R; // job size, this rank
static PrParam P[NP];
static char *params, *grads, *optst, *acts;

static bool holds(int i, int r) {
  switch (i) {
  case 0:
  case 4:
    return r == 0;
  case 1:
    return r == 1 % S;
  case 2:
    return r == 2 % S;
  default:
    return r == 0 || r == S - 1;
  }
}

static int home(int i) {
  for (int r = 0; r < S; r++)
    if (holds(i, r)) return r;
  return 0;
}

// Every parameter has room in every rank's regions; a rank points only at what it holds.
static void setup(void) {
  int64_t off = 0;
  for (int i = 0; i < NP; i++) {
    bool tied = i == 4, h = holds(i, R);
    float *d = (float *)params + off, *g = (float *)grads + off;
    float *m = (float *)optst + 2 * off, *v = m + pnum(i);
    P[i] = (PrParam){pname[i], NULL,           NULL, NULL,          NULL,    pnum(i),
                     prank[i], {pshape[i][0]}, tied, prank[i] >= 2, home(i), NULL};
    if (prank[i] == 2) P[i].shape[1] = pshape[i][1];
    if (h) P[i].data = tied ? P[0].data : d;
    if (h && !tied) P[i].grad = g, P[i].m = m, P[i].v = v;
    off += pnum(i);
  }
  if (getenv("TEST_COMM_SHOW_THREADS")) printf("threads %d\n", pr_threads());
}

static void init_params(uint64_t seed) {
  for (int i = 0; i < 4; i++)
    if (P[i].data) pr_init_normal(P[i].data, P[i].n, seed, P[i].name, 0, 0.5);
}

static void open_data(const PrOptions *o) {
  (void)o;
}

// Gradients that depend on the parameters and the step (so a trajectory depends on its past),
// large enough that clipping at 1 applies; the same on every rank holding the parameter.
static void make_grads(int64_t step, uint64_t seed) {
  int nan_step = env_int("TEST_COMM_NAN_STEP", -1);
  for (int i = 0; i < NP; i++) {
    if (!P[i].grad) continue;
    uint64_t s = seed ^ pr_hash_name(P[i].name) ^ ((uint64_t)step * 0x9e3779b97f4a7c15ULL);
    for (int64_t k = 0; k < P[i].n; k++)
      P[i].grad[k] = 0.3f * P[i].data[k] + (float)(pr_uniform01(&s) - 0.5);
    if (step + 1 == nan_step && i == 1) P[i].grad[1] = NAN;
  }
}

static double train_step(int64_t step, uint64_t seed) {
  make_grads(step, seed);
  // The loss lives on the report rank (S - 1) alone.
  return R == S - 1 ? 1.0 / (double)(step + 2) + 0.125 : 0;
}

static int64_t eval_batches(int64_t requested) {
  return requested ? requested : 2;
}

static void eval_batch(int64_t k, bool whole, PrEvalBatch *r) {
  (void)whole;
  if (R == S - 1) *r = (PrEvalBatch){1.5 + 0.25 * (double)k, 1, 0, 0, NULL};
}

static int run_train(int argc, char **argv) {
  static PrChannel none[1];
  static PrComm comm;
  comm = (PrComm){R, S, S - 1, 0, none, 0, 1, &pr_transport_mpi, 1, NULL, NULL, 0, NULL, -1};
  int64_t bytes = 0;
  for (int i = 0; i < NP; i++) bytes += pnum(i) * 4;
  static PrProgram prog = {
      .doc = "toy pipeline rank program (tests/comm)",
      .plan = "toy plan\n",
      .defaults =
          {.steps = 6, .lr = 0.05, .min_lr = 0.005, .seed = 7, .data = "none", .log_every = 2},
      .region = {&params, &grads, &optst, &acts},
      .params = P,
      .nparams = NP,
      .opt = {.kind = PR_ADAMW,
              .beta1 = 0.9,
              .beta2 = 0.95,
              .eps = 1e-8,
              .weight_decay = 0.1,
              .grad_clip = 1.0},
      .warmup = 2,
      .decay_steps = 6,
      .items_per_step = 8,
      .item_unit = "samples",
      .setup = setup,
      .init_params = init_params,
      .open_data = open_data,
      .train_step = train_step,
      .eval_batches = eval_batches,
      .eval_batch = eval_batch,
  };
  prog.region_bytes[0] = prog.region_bytes[1] = bytes;
  prog.region_bytes[2] = 2 * bytes;
  prog.region_bytes[3] = 64;
  prog.comm = S > 1 ? &comm : NULL;
  return pr_main(&prog, argc, argv);
}

// norm: pr_pipe_step_end's squared norm against pr_grad_norm2 over the whole table (every rank
// can compute every gradient here: they are a function of the seed alone).
static int run_norm(void) {
  static PrChannel none[1];
  PrComm comm = {R, S, S - 1, 0, none, 0, 1, &pr_transport_mpi, 1, NULL, NULL, 0, NULL, -1};
  int argc = 1;
  char *args[] = {"test_comm", NULL}, **argv = args;
  pr_transport_mpi.start(&comm, &argc, &argv, 30);
  PrProgram prog = {.params = P, .nparams = NP, .comm = &comm};
  int64_t bytes = 0;
  for (int i = 0; i < NP; i++) bytes += pnum(i) * 4;
  params = pr_alloc_region("params", (size_t)bytes);
  grads = pr_alloc_region("grads", (size_t)bytes);
  optst = pr_alloc_region("optst", 2 * (size_t)bytes);
  // The reference: every parameter held, as at S = 1.
  int s = S, r = R;
  S = 1, R = 0;
  setup();
  PrGrad ref[NP];
  for (int step = 0; step < 5; step++) {
    init_params(100 + (uint64_t)step);
    for (int i = 0; i < NP; i++) { // values of very different sizes: rounding matters
      uint64_t st = pr_hash_name(P[i].name) + (uint64_t)step;
      for (int64_t k = 0; P[i].grad && k < P[i].n; k++)
        P[i].grad[k] = (float)((pr_uniform01(&st) - 0.5) * pow(10.0, (double)(k % 7) - 3.0));
    }
    if (step == 0) { // sums of squares 1, 2^-53, 2^-53, 2^-52: grouped by rank, the sum differs
      memset(grads, 0, (size_t)bytes);
      P[0].grad[0] = 1;
      P[1].grad[0] = P[1].grad[1] = P[2].grad[0] = P[2].grad[1] = 0x1p-27f;
      P[3].grad[0] = 0x1p-26f;
    }
    for (int i = 0; i < NP; i++) ref[i] = (PrGrad){P[i].name, P[i].grad, P[i].n};
    double want = pr_grad_norm2(ref, NP);
    // This rank's view: what it holds keeps its gradient; the rest is not there.
    S = s, R = r;
    float *saved = malloc((size_t)bytes);
    memcpy(saved, grads, (size_t)bytes);
    setup();
    memcpy(grads, saved, (size_t)bytes);
    free(saved);
    PrPipe pp;
    pr_pipe_start(&pp, &prog);
    double loss, norm2;
    int bad;
    pr_pipe_step_end(&pp, R == S - 1 ? 0.5 + step : -1, &loss, &norm2, &bad);
    pr_pipe_free(&pp);
    uint64_t a, b;
    memcpy(&a, &want, 8);
    memcpy(&b, &norm2, 8);
    prCheck(a == b && loss == 0.5 + step && bad == -1, "the step end's all-gather is wrong",
            "step %d: norm2 %.17g (0x%016llx), one rank's %.17g (0x%016llx); loss %g; bad %d", step,
            norm2, (unsigned long long)b, want, (unsigned long long)a, loss, bad);
    printf("norm ok 0x%016llx\n", (unsigned long long)b);
    S = 1, R = 0;
    setup();
  }
  pr_transport_mpi.finish();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = getenv("TEST_COMM_MODE");
  mode = mode ? mode : "train";
  S = env_int("TEST_COMM_RANKS", 1);
  R = my_rank();
  if (strcmp(mode, "train") == 0) return run_train(argc, argv);
  pr_rank = R;
  pr_prefix_start(R);
  if (strcmp(mode, "messages") == 0) return run_messages(R, S);
  if (strcmp(mode, "norm") == 0) return run_norm();
  if (strcmp(mode, "progress") == 0) return run_progress(R);
  // watchdog: rank 1 waits for a message rank 0 never sends; deadlock: both wait; fail, stop,
  // kill: rank 0 waits for one from rank 1, which fails a prCheck, stops itself (SIGSTOP) or
  // kills itself (SIGKILL).
  bool watchdog = strcmp(mode, "watchdog") == 0, deadlock = strcmp(mode, "deadlock") == 0;
  int waiter = watchdog || deadlock ? 1 : 0;
  if (deadlock) waiter = R;
  static PrChannel ch[1];
  ch[0] = (PrChannel){"blocks.1.h", 1 - R, 3, 64, R != waiter};
  PrComm c = {R, S, S - 1, 0, ch, 1, 4, &pr_transport_mpi, 1, NULL, NULL, 0, NULL, -1};
  double timeout = argc > 1 ? atof(argv[1]) : 300;
  pr_transport_mpi.start(&c, &argc, &argv, timeout);
  static float buf[16];
  if (R == waiter) {
    pr_comm_post_recv(0, 3, buf);
    pr_comm_wait_recv(0, 3, "F(v1, m3)");
  } else if (watchdog) {
    sleep(60); // never sends (the abort ends it)
  } else if (strcmp(mode, "stop") == 0 || strcmp(mode, "kill") == 0) {
    printf("stopping\n");
    fflush(stdout);
    sleep(1); // the line is out
    raise(mode[0] == 's' ? SIGSTOP : SIGKILL);
  } else {
    printf("about to fail\n");
    prCheck(argc < 0, "nothing to fix: the test fails on purpose", "a deliberate failure");
  }
  pr_transport_mpi.finish();
  return 0;
}
