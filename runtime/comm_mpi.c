// comm_mpi.c: the pipeline's transport over Open MPI (libpipert_mpi.a; comm.h has the contract).
//
// start joins MPI_COMM_WORLD (MPI_Init_thread, FUNNELED: only the main thread calls MPI), checks
// that mpirun gave this program the rank and job size it was compiled for, and preallocates one
// request per (stream, microbatch): a stream's message m travels with wire tag tag * nmicro + m
// on `pipe` (MPI_COMM_WORLD's ranks without replicas, below). The training loop's own traffic
// (all-gather, barrier, checkpoint transfers) runs on a duplicate communicator, so it can never
// match a stream's message.
//
// Nothing here allocates inside a step (tests/alloc counts it at S > 1): the streams' MPI_Isend
// and MPI_Irecv take their requests from Open MPI's free lists, and the step end's all-gather is
// made of persistent point-to-point requests (MPI_Send_init / MPI_Recv_init to and from every
// other rank, created at its first call, pr_pipe_start's, and restarted with MPI_Startall at every
// step end) because Open MPI's MPI_Iallgather (coll/libnbc) mallocs a schedule of about 8 blocks
// at every call (a blocking MPI_Allgather could not obey the watchdog). What Open MPI allocates
// at the first uses of a peer happens at the start (t_start: the shared memory's fast boxes).
//
// With replicas (PrComm.replicas D > 1: --replicas, docs/pipeline.md) the job has S x D
// processes, world rank d * S + s for replica d's pipeline rank s. start splits MPI_COMM_WORLD by
// replica into `pipe` (ranks = pipeline ranks), on which the streams and the training loop's
// traffic run exactly as without replicas, and by pipeline rank into `rep` (ranks = replicas),
// on which the replicas' all-gather moves the gradients of a stage between its replicas
// (replicas.c); world_barrier and abort span the whole job. The replicas' all-gather is made of
// persistent requests too, one receive and one send per (bucket, other replica), tag 2 + bucket
// on rep: replica_setup makes them (pr_replicas_start, before the steps), replica_recv starts
// every receive, replica_send(k) a bucket's sends as soon as its gradients are final (the
// overlap), replica_wait completes them all at the step end. A replicated step allocates
// nothing either.
//
// PipeDream's uneven form (PrComm.stage_reps: --replicas D0,D1,.. with counts that differ) has
// D_0 + .. + D_{S-1} processes, stage by stage. The streams run on MPI_COMM_WORLD: message m of
// a stream goes to the peer rank's replica m mod D_peer (replica r of a peer with this rank's
// count D_s, as the step end's exchange streams need; for a channel the two agree). start splits
// the world by replica r into ctl (the replica-0 ranks form a whole pipeline, ranks = pipeline
// ranks: the checkpoint's all-gathers, transfers and barrier run there as at D = 1; the others'
// groups only meet at barriers) and by pipeline rank into rep (the D_s replicas of this rank,
// exchanging gradients as above). The step end's all-gather (job_allgather) spans the whole job
// and keeps, for each pipeline rank, its replica 0's contribution (the replicas of a rank hold
// the same bits once they have summed their gradients).
//
// With --trace, each message's post and the end of its wait are reported to trace.c.
//
// Progress. Over shared memory a large message is a rendezvous: it completes only once the
// receiver is inside MPI after the sender's MPI_Isend. The generated program calls
// pr_comm_progress between the kernels of its compute actions (codegen/segment.c), which tests
// every outstanding stream request at once (MPI_Testsome: Open MPI's progress engine runs when
// none has completed yet) and returns at once when none is outstanding. A request it completes
// is NULL in MPI's eyes, so fin[] remembers that it completed: the wait then returns without
// waiting (its statistics and trace record the wait's end as before), and post_recv/send treat
// the request as in use until that wait.
//
// Every wait polls with MPI_Test (with sched_yield between polls when Open MPI is told the cores
// are oversubscribed, OMPI_MCA_mpi_yield_when_idle=1) and obeys the watchdog: a wait longer than
// --timeout seconds is an error naming the tensor, microbatch, peer rank and action, and after a
// probe of every rank ("Who is missing" below) the ranks that do not respond, which aborts the
// job (pr_fail -> abort -> MPI_Abort) instead of hanging it. Ranks in messages are world ranks.
// The start, whose MPI calls block outside any such wait, has a watchdog thread of its own ("The
// start's guard").
#include "pipert.h"

#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// An all-gather of n doubles per rank over a communicator, by persistent requests made for one
// set of buffers (n == 0: none yet): req[2k] receives from and req[2k + 1] sends to the k-th
// other rank. The allgather's (over ctl) and the uneven form's job-wide one (over jctl).
typedef struct Gather {
  MPI_Comm comm;      // over it
  int me, size;       // this rank in it, and its ranks
  const double *mine; // the contribution the requests send
  double *all;        // where they land, rank r's at r * n
  int n;              // doubles per rank (0: no requests)
  MPI_Request *req;   // 2 * (size - 1) requests (allocated at the start)
  int *world;         // per rank of comm, its world rank (NULL: the same; made at the start)
} Gather;

static struct {
  const PrComm *c;  // the program's streams (NULL until start)
  MPI_Request *req; // req[c * nmicro + m]: the request of (stream c, microbatch m)
  bool *fin;        // per request: completed by pr_comm_progress, its wait not called yet
  int *idx;         // MPI_Testsome's indices (one per request, allocated at the start)
  int active;       // requests posted or sent and not yet completed (0: progress returns)
  MPI_Comm ctl;     // duplicate of pipe for the training loop's traffic
  MPI_Comm pipe;    // this replica's ranks (MPI_COMM_WORLD itself without replicas)
  MPI_Comm rep;     // this pipeline rank's replicas, rank = replica d (replica_setup ..)
  MPI_Comm world;   // duplicate of MPI_COMM_WORLD (world_barrier; both MPI_COMM_NULL at D = 1)
  int *pipe_w;      // per rank of pipe, its world rank (NULL: pipe is MPI_COMM_WORLD)
  int *rep_w;       // per replica (rank of rep), its world rank (NULL: no rep)
  int replicas;     // D (1: none); D_s of this rank in the uneven form
  const int *reps;  // the uneven form's counts per pipeline rank (PrComm.stage_reps; NULL: none)
  int *base;        // uneven: per pipeline rank s (and S), its replica 0's world rank
  // The uneven form's job-wide all-gather (job_allgather), over jctl, landing in jg_all.
  MPI_Comm jctl;  // duplicate of MPI_COMM_WORLD (uneven only)
  Gather jg;      // its requests (uneven only)
  double *jg_all; // world size x jg.n doubles
  double timeout; // watchdog, seconds (0 = off)
  bool yield;     // sched_yield between polls (oversubscribed cores)
  bool started;   // MPI is initialised and not finalized
  Gather ag;      // the allgather's requests, over ctl (the pipeline's ranks)
  // The replicas' all-gather in buckets (rg_nb == 0: not set up): rg_req[k * (D - 1) + j]
  // receives bucket k from the j-th other replica; rg_req[(nb + k) * (D - 1) + j] sends it there.
  const void *rg_mine; // the caller's message
  void *rg_all;        // the caller's result buffer (replica d's message at d * rg_bytes)
  int64_t rg_bytes;    // bytes per replica (its whole message)
  int rg_nb;           // buckets
  MPI_Request *rg_req; // 2 * nb * (replicas - 1) requests
  bool *rg_sent;       // per bucket: its sends started in this exchange
  bool rg_active;      // an exchange's receives are started and not yet waited for
} mpi;

enum { TAG_ALLGATHER = 1 }; // on ctl (checkpoint transfers use tag 0)

static const char *const HINT_TIMEOUT =
    "a rank is stopped, crashed or deadlocked, or merely slower than --timeout allows: raise "
    "--timeout SECONDS (0 = off) if it is only slow";

// Stops on an MPI error code with the call's name and MPI's text.
void pr_mpi_check(int rc, const char *call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "code %d", rc);
  pr_fail(__FILE__, __LINE__, "check the MPI installation and the launcher (OUT/launch.sh)",
          "%s failed: %s", call, text);
}

// ---------------------------------------------------------------------------------------------
// Who is missing. A wait that outlasts --timeout knows whom it waits for (a stream's peer, a
// request of an all-gather), but that rank may itself wait for another (at S >= 3 the neighbour of
// a stopped rank), and a collective waits for every rank. So before it stops the job, the rank
// that timed out probes every rank of the job (pb.comm, a duplicate of MPI_COMM_WORLD: world
// ranks, those of the [rank r] prefixes and of mpirun) and collects the answers for up to
// min(--timeout, 10 s): a rank answers from its own wait loop (every 64 polls, where the watchdog
// reads the clock; pb.in is a persistent receive from any rank, started at the start) with the
// world rank it waits for. A rank stopped, or busy outside MPI that long, does not answer: the
// message names those ranks; when every rank answers (a deadlock, or a rank merely slower than
// --timeout) it lists whom each waits for. The first rank to reach its verdict speaks for the job:
// it tells every rank so (TAG_SAID, pb.said a persistent receive of it) before it prints and
// aborts, and a rank told so stays silent until the abort ends it. Else the ranks whose probes
// overlapped that one would go on collecting answers while the abort runs, and Open MPI's abort
// continues a stopped rank (SIGCONT, so that its SIGTERM is delivered), which may then answer them.
// None of this runs in a step that does not time out, beyond an MPI_Test every 64 polls of a wait.
enum { TAG_PROBE = 1, TAG_ANSWER = 2, TAG_SAID = 3 }; // on pb.comm
enum { ON_EVERY = -1, NO_ANSWER = -2 }; // answers: a collective (every rank); none yet

typedef struct Probes {
  MPI_Comm comm;          // duplicate of MPI_COMM_WORLD (MPI_COMM_NULL: none yet)
  int me, size;           // this rank and the job's size, world ranks
  int in_buf, said_buf;   // a probe's and a notice's (empty) payloads, received
  MPI_Request in;         // persistent receive of a probe from any rank
  MPI_Request said;       // persistent receive of a notice: another rank has spoken
  int *out;               // out[q]: the answer sent to rank q (whom this rank waits for)
  MPI_Request *out_req;   // its send
  int *reply;             // reply[q]: rank q's answer to this rank's probe (NO_ANSWER: none)
  MPI_Request *probe_req; // per rank: the probe's send
  MPI_Request *reply_req; // per rank: the answer's receive
  MPI_Request *said_req;  // per rank: the notice's send
} Probes;
static Probes pb = {.comm = MPI_COMM_NULL};

// Answers the probes that have arrived: this rank waits for world rank `on` (or ON_EVERY).
static void answer_probes(int on) {
  if (pb.comm == MPI_COMM_NULL) return;
  for (;;) {
    int got = 0, gone = 0;
    MPI_Status st;
    pr_mpi_check(MPI_Test(&pb.in, &got, &st), "MPI_Test");
    if (!got) return;
    const int q = st.MPI_SOURCE;
    pr_mpi_check(MPI_Test(&pb.out_req[q], &gone, MPI_STATUS_IGNORE), "MPI_Test");
    if (gone) { // (else an answer to q is still on its way: q asked twice)
      pb.out[q] = on;
      pr_mpi_check(MPI_Isend(&pb.out[q], 1, MPI_INT, q, TAG_ANSWER, pb.comm, &pb.out_req[q]),
                   "MPI_Isend");
    }
    pr_mpi_check(MPI_Start(&pb.in), "MPI_Start");
  }
}

static const int zero = 0; // the payload of probes and notices

// Whether another rank has spoken for the job (its notice has come).
static bool spoken(void) {
  int got = 0;
  pr_mpi_check(MPI_Test(&pb.said, &got, MPI_STATUS_IGNORE), "MPI_Test");
  return got;
}

// Asks every other rank whom it waits for, collecting pb.reply for up to `grace` seconds (or
// until all have answered, or another rank has spoken: then false), answering the others' probes
// meanwhile (this rank waits for `on`).
static bool probe(int on, double grace) {
  for (int q = 0; q < pb.size; q++) {
    pb.reply[q] = NO_ANSWER;
    pb.probe_req[q] = pb.reply_req[q] = MPI_REQUEST_NULL;
    if (q == pb.me) continue;
    pr_mpi_check(MPI_Irecv(&pb.reply[q], 1, MPI_INT, q, TAG_ANSWER, pb.comm, &pb.reply_req[q]),
                 "MPI_Irecv");
    pr_mpi_check(MPI_Isend(&zero, 1, MPI_INT, q, TAG_PROBE, pb.comm, &pb.probe_req[q]),
                 "MPI_Isend");
  }
  pb.reply[pb.me] = on;
  for (double t0 = pr_now(); pr_now() - t0 < grace;) {
    answer_probes(on);
    if (spoken()) return false;
    int left = 0;
    for (int q = 0; q < pb.size; q++) {
      int done = 1;
      if (pb.reply_req[q] != MPI_REQUEST_NULL)
        pr_mpi_check(MPI_Test(&pb.reply_req[q], &done, MPI_STATUS_IGNORE), "MPI_Test");
      left += !done;
    }
    if (left == 0) return !spoken();
    sched_yield(); // (the ranks that answer may share this core)
  }
  for (int q = 0; q < pb.size; q++) // an answer that came after the grace does not count
    if (pb.reply_req[q] != MPI_REQUEST_NULL) pb.reply[q] = NO_ANSWER;
  return !spoken();
}

// This rank speaks for the job: every other rank is told so (the sends need not complete: the
// abort follows).
static void speak(void) {
  for (int q = 0; q < pb.size; q++)
    if (q != pb.me)
      pr_mpi_check(MPI_Isend(&zero, 1, MPI_INT, q, TAG_SAID, pb.comm, &pb.said_req[q]),
                   "MPI_Isend");
}

// Another rank has spoken and is ending the job: this one waits for the end, answering probes
// (`on`), for up to 10 s; should the end not come, it returns and the caller speaks after all.
static void await_end(int on) {
  for (double t0 = pr_now(); pr_now() - t0 < 10;) {
    answer_probes(on);
    struct timespec ts = {0, 1000 * 1000};
    nanosleep(&ts, NULL);
  }
}

// Appends fmt... to out (n bytes used of cap; beyond cap: cut, n past it).
__attribute__((format(printf, 4, 5))) static void put(char *out, size_t cap, size_t *n,
                                                      const char *fmt, ...) {
  if (*n >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(out + *n, cap - *n, fmt, ap);
  va_end(ap);
  *n += k > 0 ? (size_t)k : 0;
}

// "; rank 2 does not respond", "; ranks 1, 3 do not respond", or when every rank answered,
// "; every rank responds (rank 0 waits for rank 1, rank 1 for every rank, ..)", from pb.reply.
static void probe_verdict(char *out, size_t cap) {
  size_t n = 0;
  int silent = 0;
  out[0] = 0;
  for (int q = 0; q < pb.size; q++) silent += pb.reply[q] == NO_ANSWER;
  if (silent > 0) {
    put(out, cap, &n, "; rank%s", silent > 1 ? "s" : "");
    for (int q = 0, k = 0; q < pb.size; q++)
      if (pb.reply[q] == NO_ANSWER) put(out, cap, &n, "%s %d", k++ ? "," : "", q);
    put(out, cap, &n, " do%s not respond", silent > 1 ? "" : "es");
  } else {
    put(out, cap, &n, "; every rank responds (");
    for (int q = 0; q < pb.size; q++) {
      put(out, cap, &n, q ? ", rank %d for" : "rank %d waits for", q);
      if (pb.reply[q] == ON_EVERY)
        put(out, cap, &n, " every rank");
      else
        put(out, cap, &n, " rank %d", pb.reply[q]);
    }
    put(out, cap, &n, ")");
  }
  if (n >= cap && cap > 4) memcpy(out + cap - 4, "...", 4); // cut: say so
}

// Polls *r until it completes, or stops the job once the watchdog runs out; `on` is the world
// rank the wait is for (ON_EVERY: a collective), fmt... says what the wait is for ("timeout:
// waited 2 s " precedes it, and who is missing follows), formatted only then.
__attribute__((format(printf, 3, 4))) static void wait_request(MPI_Request *r, int on,
                                                               const char *fmt, ...) {
  double t0 = mpi.timeout > 0 ? pr_now() : 0;
  for (long polls = 0;; polls++) {
    int done = 0;
    pr_mpi_check(MPI_Test(r, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) return;
    if (mpi.yield) sched_yield();
    if ((polls & 63) != 63) continue;
    answer_probes(on);
    if (mpi.timeout > 0 && pr_now() - t0 > mpi.timeout) {
      char what[1024], verdict[1024];
      va_list ap;
      va_start(ap, fmt);
      vsnprintf(what, sizeof what, fmt, ap);
      va_end(ap);
      if (!probe(on, mpi.timeout < 10 ? mpi.timeout : 10)) await_end(on);
      speak();
      probe_verdict(verdict, sizeof verdict);
      pr_fail(__FILE__, __LINE__, HINT_TIMEOUT, "timeout: waited %g s %s%s", mpi.timeout, what,
              verdict);
    }
  }
}

// The stream c's request for microbatch m, checked.
static MPI_Request *request(int c, int m, bool send, const char *fn) {
  prCheck(mpi.c != NULL, "call pr_main first (it starts the transport)",
          "%s: the transport is not started", fn);
  prCheck(c >= 0 && c < mpi.c->nch && m >= 0 && m < mpi.c->nmicro, "a bug in the generated program",
          "%s: no stream %d, microbatch %d (the program has %d streams of %d microbatches)", fn, c,
          m, mpi.c->nch, mpi.c->nmicro);
  prCheck(mpi.c->ch[c].send == send, "a bug in the generated program",
          "%s: stream %d ('%s') is a %s stream", fn, c, mpi.c->ch[c].tensor,
          mpi.c->ch[c].send ? "send" : "receive");
  return &mpi.req[(int64_t)c * mpi.c->nmicro + m];
}

// The world rank of rank r of a communicator whose world ranks are w (NULL: the world's own).
static inline int world_of(const int *w, int r) {
  return w ? w[r] : r;
}

// The world (pipe) rank that stream ch's message m goes to or comes from: its peer, or in the
// uneven form that peer's replica m mod D_peer (replica pr_replica when D_peer = D_s).
static int peer_of(const PrChannel *ch, int m) {
  if (!mpi.reps) return ch->peer;
  int D = mpi.reps[ch->peer];
  return mpi.base[ch->peer] + (D == mpi.replicas ? pr_replica : m % D);
}

void pr_comm_post_recv(int c, int m, void *buf) {
  MPI_Request *r = request(c, m, false, "pr_comm_post_recv");
  const PrChannel *ch = &mpi.c->ch[c];
  prCheck(*r == MPI_REQUEST_NULL && !mpi.fin[r - mpi.req], "a bug in the generated program",
          "pr_comm_post_recv: '%s' microbatch %d is already posted", ch->tensor, m);
  pr_trace_post(c, m); // before the call, as the send's
  pr_mpi_check(MPI_Irecv(buf, (int)ch->bytes, MPI_BYTE, peer_of(ch, m), ch->tag * mpi.c->nmicro + m,
                         mpi.pipe, r),
               "MPI_Irecv");
  mpi.active++;
}

void pr_comm_wait_recv(int c, int m, const char *action) {
  MPI_Request *r = request(c, m, false, "pr_comm_wait_recv");
  const PrChannel *ch = &mpi.c->ch[c];
  bool *fin = &mpi.fin[r - mpi.req];
  prCheck(*r != MPI_REQUEST_NULL || *fin, "a bug in the generated program",
          "pr_comm_wait_recv: '%s' microbatch %d was never posted (%s)", ch->tensor, m, action);
  if (*fin) { // pr_comm_progress completed it
    *fin = false;
  } else {
    double t = pr_now();
    const int w = world_of(mpi.pipe_w, peer_of(ch, m));
    wait_request(r, w, "for tensor '%s' microbatch %d from rank %d (%s)", ch->tensor, m, w, action);
    mpi.active--;
    pr_stats.recv_wait += pr_now() - t;
  }
  pr_stats.received += ch->bytes;
  pr_trace_done(c, m);
}

void pr_comm_send(int c, int m, const void *buf) {
  MPI_Request *r = request(c, m, true, "pr_comm_send");
  const PrChannel *ch = &mpi.c->ch[c];
  prCheck(*r == MPI_REQUEST_NULL && !mpi.fin[r - mpi.req], "a bug in the generated program",
          "pr_comm_send: '%s' microbatch %d is still being sent", ch->tensor, m);
  // The trace's send starts before MPI_Isend: over shared memory a small message can be
  // delivered, and its receive completed, before the call returns (a time read after it put the
  // send after the receive's end in one loaded run).
  pr_trace_post(c, m);
  pr_mpi_check(MPI_Isend(buf, (int)ch->bytes, MPI_BYTE, peer_of(ch, m), ch->tag * mpi.c->nmicro + m,
                         mpi.pipe, r),
               "MPI_Isend");
  mpi.active++;
  pr_stats.sent += ch->bytes;
}

void pr_comm_wait_send(int c, int m) {
  MPI_Request *r = request(c, m, true, "pr_comm_wait_send");
  bool *fin = &mpi.fin[r - mpi.req];
  if (*fin) { // pr_comm_progress completed it
    *fin = false;
    pr_trace_done(c, m);
    return;
  }
  if (*r == MPI_REQUEST_NULL) return; // never sent, or already waited for
  const PrChannel *ch = &mpi.c->ch[c];
  double t = pr_now();
  const int w = world_of(mpi.pipe_w, peer_of(ch, m));
  wait_request(r, w, "to send tensor '%s' microbatch %d to rank %d", ch->tensor, m, w);
  mpi.active--;
  pr_stats.send_wait += pr_now() - t;
  pr_trace_done(c, m);
}

void pr_comm_progress(void) {
  if (mpi.active == 0) return; // nothing outstanding (or no transport): no MPI call
  int n = 0;
  pr_mpi_check(MPI_Testsome(mpi.c->nch * mpi.c->nmicro, mpi.req, &n, mpi.idx, MPI_STATUSES_IGNORE),
               "MPI_Testsome");
  for (int k = 0; k < n && n != MPI_UNDEFINED; k++) mpi.fin[mpi.idx[k]] = true;
  if (n != MPI_UNDEFINED) mpi.active -= n;
}

void pr_comm_wait_sends(void) {
  prCheck(mpi.c != NULL, "call pr_main first (it starts the transport)",
          "pr_comm_wait_sends: the transport is not started");
  for (int c = 0; c < mpi.c->nch; c++)
    if (mpi.c->ch[c].send)
      for (int m = 0; m < mpi.c->nmicro; m++) pr_comm_wait_send(c, m);
}

// ---------------------------------------------------------------------------------------------
// The training loop's operations

__attribute__((noreturn)) static void t_abort(int status) {
  fflush(stdout);
  fflush(stderr);
  pr_prefix_stop(); // every line printed so far is out before the job goes
  if (mpi.started) MPI_Abort(MPI_COMM_WORLD, status ? status : 1);
  _Exit(status ? status : 1);
}

// ---------------------------------------------------------------------------------------------
// The start's guard. MPI_Init_thread and the start's communicator calls (MPI_Comm_split,
// MPI_Comm_dup, ..) block until every rank of the job takes part, outside any wait loop of ours: a
// rank not started, stopped or crashed before or inside them would hang the others with no
// message and no end. A thread armed before MPI_Init_thread ends this process once the start has
// lasted --timeout, naming the call the main thread waits in (it makes no MPI call itself: only
// the main thread may); mpirun then ends the whole job, a stopped rank included, non-zero. The
// rank that did not come cannot be named there: nothing but those calls connects the ranks yet.
static struct {
  pthread_t thread;
  bool armed;                 // the thread runs (joined at the start's end)
  atomic_bool done;           // the start is over: the thread returns
  _Atomic(const char *) call; // the call the start is in
  atomic_int rank;            // this process's world rank as known so far (the message's)
  int ranks;                  // the job's processes
  double t0, timeout;         // armed at t0 for timeout seconds
} guard;

// The start enters MPI call `call` (the guard's message names it).
static void starting(const char *call) {
  atomic_store(&guard.call, call);
}

__attribute__((noreturn)) static void guard_fire(void) {
  const char *base = strrchr(__FILE__, '/');
  fflush(stdout);
  fprintf(stderr,
          "%s:%d: rank %d: error: timeout: waited %g s for the %d ranks of the job to start (in "
          "%s)\nHINT: %s\n",
          base ? base + 1 : __FILE__, __LINE__, atomic_load(&guard.rank), guard.timeout,
          guard.ranks, atomic_load(&guard.call), HINT_TIMEOUT);
  fflush(stderr);
  pr_prefix_stop(); // the lines out before the process goes
  _exit(1);
}

static void *guard_main(void *arg) {
  (void)arg;
  while (!atomic_load(&guard.done)) {
    if (pr_now() - guard.t0 > guard.timeout) guard_fire();
    struct timespec ts = {0, 10 * 1000 * 1000};
    nanosleep(&ts, NULL);
  }
  return NULL;
}

// Arms the guard for c's start (timeout 0: none). Until MPI_Comm_rank this rank is its compiled
// one, or with replicas the one mpirun put in the environment (Open MPI's OMPI_COMM_WORLD_RANK).
static void guard_arm(const PrComm *c, double timeout) {
  guard.ranks = c->nranks * (c->replicas > 1 ? c->replicas : 1);
  if (c->stage_reps)
    for (int s = guard.ranks = 0; s < c->nranks; s++) guard.ranks += c->stage_reps[s];
  int rank = c->rank;
  const char *e = getenv("OMPI_COMM_WORLD_RANK");
  char *end = NULL;
  long r = e ? strtol(e, &end, 10) : -1;
  if (pr_comm_replicated(c) && e && *end == 0 && r >= 0 && r < guard.ranks) rank = (int)r;
  atomic_store(&guard.rank, rank);
  atomic_store(&guard.done, false);
  starting("MPI_Init_thread");
  guard.armed = false;
  if (!(timeout > 0)) return;
  guard.t0 = pr_now(), guard.timeout = timeout;
  prCheck(pthread_create(&guard.thread, NULL, guard_main, NULL) == 0,
          "the machine is out of threads or memory", "cannot start the start's watchdog thread");
  guard.armed = true;
}

static void guard_disarm(void) {
  if (!guard.armed) return;
  atomic_store(&guard.done, true);
  pthread_join(guard.thread, NULL);
  guard.armed = false;
}

// The world ranks of comm's ranks 0 .. n - 1 (-1 past its size), allocated (the start's).
static int *world_ranks(MPI_Comm comm, int n) {
  int size = 0, *in = malloc((size_t)n * sizeof *in), *out = malloc((size_t)n * sizeof *out);
  prCheck(in && out, "the machine is out of memory", "cannot allocate the rank tables");
  MPI_Group g, w;
  pr_mpi_check(MPI_Comm_size(comm, &size), "MPI_Comm_size");
  pr_mpi_check(MPI_Comm_group(comm, &g), "MPI_Comm_group");
  pr_mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &w), "MPI_Comm_group");
  for (int i = 0; i < n; i++) in[i] = i, out[i] = -1;
  pr_mpi_check(MPI_Group_translate_ranks(g, n < size ? n : size, in, w, out),
               "MPI_Group_translate_ranks");
  MPI_Group_free(&g);
  MPI_Group_free(&w);
  free(in);
  return out;
}

// The probes' communicator, requests and answers (pb), its receive of probes started.
static void probe_start(void) {
  starting("MPI_Comm_dup");
  pr_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &pb.comm), "MPI_Comm_dup");
  pr_mpi_check(MPI_Comm_rank(pb.comm, &pb.me), "MPI_Comm_rank");
  pr_mpi_check(MPI_Comm_size(pb.comm, &pb.size), "MPI_Comm_size");
  const size_t n = (size_t)pb.size;
  pb.out = calloc(n, sizeof *pb.out);
  pb.reply = calloc(n, sizeof *pb.reply);
  pb.out_req = malloc(n * sizeof *pb.out_req);
  pb.probe_req = malloc(n * sizeof *pb.probe_req);
  pb.reply_req = malloc(n * sizeof *pb.reply_req);
  pb.said_req = malloc(n * sizeof *pb.said_req);
  prCheck(pb.out && pb.reply && pb.out_req && pb.probe_req && pb.reply_req && pb.said_req,
          "the machine is out of memory", "cannot allocate the MPI requests");
  for (size_t q = 0; q < n; q++)
    pb.out_req[q] = pb.probe_req[q] = pb.reply_req[q] = pb.said_req[q] = MPI_REQUEST_NULL;
  pr_mpi_check(MPI_Recv_init(&pb.in_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_PROBE, pb.comm, &pb.in),
               "MPI_Recv_init");
  pr_mpi_check(MPI_Recv_init(&pb.said_buf, 1, MPI_INT, MPI_ANY_SOURCE, TAG_SAID, pb.comm, &pb.said),
               "MPI_Recv_init");
  pr_mpi_check(MPI_Start(&pb.in), "MPI_Start");
  pr_mpi_check(MPI_Start(&pb.said), "MPI_Start");
}

// Ends pb (at the job's end, after its barrier: no probe is on its way).
static void probe_free(void) {
  if (pb.comm == MPI_COMM_NULL) return;
  MPI_Request *mine[2] = {&pb.in, &pb.said};
  for (int k = 0; k < 2; k++) {
    pr_mpi_check(MPI_Cancel(mine[k]), "MPI_Cancel");
    pr_mpi_check(MPI_Wait(mine[k], MPI_STATUS_IGNORE), "MPI_Wait");
    pr_mpi_check(MPI_Request_free(mine[k]), "MPI_Request_free");
  }
  for (int q = 0; q < pb.size; q++)
    if (pb.out_req[q] != MPI_REQUEST_NULL) MPI_Request_free(&pb.out_req[q]);
  MPI_Comm_free(&pb.comm);
  free(pb.out);
  free(pb.reply);
  free(pb.out_req);
  free(pb.probe_req);
  free(pb.reply_req);
  free(pb.said_req);
  pb = (Probes){.comm = MPI_COMM_NULL};
}

static int start_streams(const PrComm *c, int rank, double timeout);

// The uneven form's start (after MPI_Init): the layout checked, the communicators split.
static int start_uneven(const PrComm *c, int rank, int size, double timeout) {
  const int S = c->nranks;
  mpi.reps = c->stage_reps;
  mpi.base = malloc(((size_t)S + 1) * sizeof *mpi.base);
  prCheck(mpi.base != NULL, "the machine is out of memory", "cannot allocate the layout");
  mpi.base[0] = 0;
  for (int s = 0; s < S; s++) mpi.base[s + 1] = mpi.base[s] + c->stage_reps[s];
  const int D = c->stage_reps[c->rank];
  prCheck(size == mpi.base[S] && rank >= mpi.base[c->rank] && rank < mpi.base[c->rank] + D,
          "run the job with OUT/launch.sh, which starts every rank's program in order",
          "this program is pipeline rank %d of %d with %d replicas (world ranks %d .. %d of a "
          "%d-rank job), but mpirun started it as rank %d of %d",
          c->rank, S, D, mpi.base[c->rank], mpi.base[c->rank] + D - 1, mpi.base[S], rank, size);
  mpi.replicas = D;
  mpi.rg_nb = 0, mpi.rg_req = NULL, mpi.rg_sent = NULL, mpi.rg_active = false;
  mpi.jg_all = NULL;
  pr_replica = rank - mpi.base[c->rank];
  mpi.pipe = MPI_COMM_WORLD; // the streams: world ranks (peer_of)
  starting("MPI_Comm_split");
  pr_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, pr_replica, rank, &mpi.ctl), "MPI_Comm_split");
  pr_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->rank, rank, &mpi.rep), "MPI_Comm_split");
  starting("MPI_Comm_dup");
  pr_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &mpi.world), "MPI_Comm_dup");
  pr_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &mpi.jctl), "MPI_Comm_dup");
  mpi.jg = (Gather){.comm = mpi.jctl, .me = rank, .size = size};
  mpi.jg.req = malloc(2 * (size_t)size * sizeof *mpi.jg.req);
  prCheck(mpi.jg.req != NULL, "the machine is out of memory", "cannot allocate the MPI requests");
  return start_streams(c, rank, timeout);
}

static int join(const PrComm *c, int *argc, char ***argv, double timeout);

// The start, under its guard (the job's ranks all there, or this process ends within timeout).
static int t_start(const PrComm *c, int *argc, char ***argv, double timeout) {
  guard_arm(c, timeout);
  int local = join(c, argc, argv, timeout);
  guard_disarm();
  return local;
}

static int join(const PrComm *c, int *argc, char ***argv, double timeout) {
  // Open MPI allocates in a step unless told otherwise (a setting in the environment wins):
  // - its shared-memory transport (btl/vader) sets up a "fast box" for a peer at the 16th message
  //   to it, from a free list that then mallocs: in one of the first steps, which one depending
  //   on the model. At the first message instead, each peer's is set up by the start's all-gather
  //   (pr_pipe_start), before the steps;
  // - a message that arrives before its receive is posted (which depends on timing: the all-gather,
  //   a rendezvous' header) is kept in the fragment itself up to pml_ob1_unexpected_limit bytes
  //   (128), beyond that in a buffer of ob1's bucket allocator, which mallocs whenever more such
  //   messages wait at once than ever before. Up to vader's eager limit (4096 bytes, the largest
  //   fragment it delivers) they stay in the fragment.
  setenv("OMPI_MCA_btl_vader_fbox_threshold", "1", 0);
  setenv("OMPI_MCA_pml_ob1_unexpected_limit", "4096", 0);
  int provided = 0;
  pr_mpi_check(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
  mpi.started = true;
  // From here an error on this rank takes the whole job down (pr_fail -> t_abort), MPI's own
  // errors included (reported by mpi_check rather than MPI's default handler).
  pr_transport = &pr_transport_mpi;
  pr_mpi_check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN),
               "MPI_Comm_set_errhandler");
  prCheck(provided >= MPI_THREAD_FUNNELED, "use an MPI built with thread support",
          "MPI provides thread level %d, below MPI_THREAD_FUNNELED", provided);
  int rank = -1, size = 0;
  pr_mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "MPI_Comm_rank");
  pr_mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &size), "MPI_Comm_size");
  atomic_store(&guard.rank, rank);
  if (c->stage_reps) return start_uneven(c, rank, size, timeout);
  const int D = c->replicas > 1 ? c->replicas : 1;
  prCheck(D > 1 || (rank == c->rank && size == c->nranks),
          "run the job with OUT/launch.sh, which starts every rank's program in order",
          "this program is rank %d of a %d-rank job, but mpirun started it as rank %d of %d",
          c->rank, c->nranks, rank, size);
  prCheck(D == 1 || (rank % c->nranks == c->rank && size == c->nranks * D),
          "run the job with OUT/launch.sh, which starts every rank's program in order",
          "this program is pipeline rank %d of %d with %d replicas (a %d-rank job), but mpirun "
          "started it as rank %d of %d",
          c->rank, c->nranks, D, c->nranks * D, rank, size);
  mpi.replicas = D, mpi.reps = NULL, mpi.base = NULL, mpi.jctl = MPI_COMM_NULL;
  mpi.rg_nb = 0, mpi.rg_req = NULL, mpi.rg_sent = NULL, mpi.rg_active = false;
  pr_replica = rank / c->nranks;
  mpi.pipe = MPI_COMM_WORLD, mpi.rep = mpi.world = MPI_COMM_NULL;
  if (D > 1) {
    starting("MPI_Comm_split");
    pr_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, pr_replica, rank, &mpi.pipe), "MPI_Comm_split");
    pr_mpi_check(MPI_Comm_split(MPI_COMM_WORLD, c->rank, rank, &mpi.rep), "MPI_Comm_split");
    starting("MPI_Comm_dup");
    pr_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &mpi.world), "MPI_Comm_dup");
    pr_mpi_check(MPI_Comm_set_errhandler(mpi.pipe, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  starting("MPI_Comm_dup");
  pr_mpi_check(MPI_Comm_dup(mpi.pipe, &mpi.ctl), "MPI_Comm_dup");
  return start_streams(c, rank, timeout);
}

// The streams' requests, the watchdog and the all-gather's request table (after the
// communicators); returns the ranks of the job on this machine.
static int start_streams(const PrComm *c, int rank, double timeout) {
  void *ub = NULL;
  int flag = 0;
  pr_mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr");
  int64_t tag_ub = flag ? *(int *)ub : 32767, top = 0;
  for (int k = 0; k < c->nch; k++) {
    prCheck(c->ch[k].tag >= 0 && c->ch[k].peer >= 0 && c->ch[k].peer < c->nranks &&
                c->ch[k].peer != c->rank && c->ch[k].bytes >= 0,
            "a bug in the generated program",
            "stream %d ('%s'): peer %d, tag %d, %lld bytes are not valid here", k, c->ch[k].tensor,
            c->ch[k].peer, c->ch[k].tag, (long long)c->ch[k].bytes);
    prCheck(c->ch[k].bytes <= INT32_MAX, "use more microbatches (smaller messages)",
            "tensor '%s': messages of %lld bytes; at most 2^31 - 1 bytes are supported",
            c->ch[k].tensor, (long long)c->ch[k].bytes);
    int64_t t = ((int64_t)c->ch[k].tag + 1) * c->nmicro - 1;
    if (t > top) top = t;
  }
  prCheck(top <= tag_ub, "use fewer microbatches or an MPI with a larger MPI_TAG_UB",
          "the streams need tags up to %lld, beyond this MPI's MPI_TAG_UB %lld", (long long)top,
          (long long)tag_ub);
  int64_t nreq = (int64_t)c->nch * c->nmicro;
  mpi.req = malloc((size_t)(nreq > 0 ? nreq : 1) * sizeof *mpi.req);
  prCheck(mpi.req != NULL, "the machine is out of memory", "cannot allocate the MPI requests");
  for (int64_t i = 0; i < nreq; i++) mpi.req[i] = MPI_REQUEST_NULL;
  mpi.fin = calloc((size_t)(nreq > 0 ? nreq : 1), sizeof *mpi.fin);
  mpi.idx = malloc((size_t)(nreq > 0 ? nreq : 1) * sizeof *mpi.idx);
  prCheck(mpi.fin != NULL && mpi.idx != NULL, "the machine is out of memory",
          "cannot allocate the MPI requests");
  mpi.active = 0;
  mpi.ag = (Gather){.comm = mpi.ctl, .me = c->rank, .size = c->nranks};
  mpi.ag.req = malloc(2 * (size_t)c->nranks * sizeof *mpi.ag.req);
  prCheck(mpi.ag.req != NULL, "the machine is out of memory", "cannot allocate the MPI requests");
  // The world ranks of the pipeline's ranks in each communicator (the messages name world ranks).
  mpi.pipe_w = mpi.pipe == MPI_COMM_WORLD ? NULL : world_ranks(mpi.pipe, c->nranks);
  mpi.ag.world = !pr_comm_replicated(c) ? NULL : world_ranks(mpi.ctl, c->nranks);
  mpi.rep_w = mpi.rep == MPI_COMM_NULL ? NULL : world_ranks(mpi.rep, mpi.replicas);
  probe_start();
  mpi.timeout = timeout;
  const char *y = getenv("OMPI_MCA_mpi_yield_when_idle");
  mpi.yield = y && strcmp(y, "1") == 0;
  mpi.c = c;
  MPI_Comm node;
  int local = 1;
  starting("MPI_Comm_split_type");
  pr_mpi_check(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type");
  pr_mpi_check(MPI_Comm_size(node, &local), "MPI_Comm_size");
  MPI_Comm_free(&node);
  return local;
}

// Frees g's persistent requests (inactive: every all-gather waits for its own).
static void gather_free(Gather *g) {
  for (int k = 0; g->n > 0 && k < 2 * (g->size - 1); k++)
    pr_mpi_check(MPI_Request_free(&g->req[k]), "MPI_Request_free");
  g->n = 0;
}

// all (g->size x n) = every rank's mine, by g's requests (made anew for new buffers).
static void gather_run(Gather *g, const double *mine, double *all, int n) {
  if (mine != g->mine || all != g->all || n != g->n) { // new buffers: new requests
    gather_free(g);
    for (int r = 0, k = 0; r < g->size; r++) {
      if (r == g->me) continue;
      pr_mpi_check(MPI_Recv_init(all + (size_t)r * (size_t)n, n, MPI_DOUBLE, r, TAG_ALLGATHER,
                                 g->comm, &g->req[k++]),
                   "MPI_Recv_init");
      pr_mpi_check(MPI_Send_init(mine, n, MPI_DOUBLE, r, TAG_ALLGATHER, g->comm, &g->req[k++]),
                   "MPI_Send_init");
    }
    g->mine = mine, g->all = all, g->n = n;
  }
  memcpy(all + (size_t)g->me * (size_t)n, mine, (size_t)n * sizeof *all);
  pr_mpi_check(MPI_Startall(2 * (g->size - 1), g->req), "MPI_Startall");
  for (int k = 0; k < 2 * (g->size - 1); k++) // (the k-th request's peer: the (k / 2)-th other)
    wait_request(&g->req[k], world_of(g->world, k / 2 + (k / 2 >= g->me)),
                 "in an all-gather with every rank (the start, or a step's end)");
}

static void t_allgather(const double *mine, double *all, int n) {
  gather_run(&mpi.ag, mine, all, n);
}

// The uneven form's all-gather over the whole job (job_allgather), keeping each pipeline rank's
// replica 0's contribution; else allgather.
static void t_job_allgather(const double *mine, double *all, int n) {
  if (!mpi.reps) {
    t_allgather(mine, all, n);
    return;
  }
  Gather *g = &mpi.jg;
  if (mine != g->mine || n != g->n) { // new buffers: a landing area for them (new requests)
    gather_free(g);
    free(mpi.jg_all);
    mpi.jg_all = malloc((size_t)g->size * (size_t)(n > 0 ? n : 1) * sizeof *mpi.jg_all);
    prCheck(mpi.jg_all != NULL, "the machine is out of memory",
            "cannot allocate the step end's all-gather");
  }
  gather_run(g, mine, mpi.jg_all, n);
  for (int s = 0; s < mpi.c->nranks; s++) // each pipeline rank's replica 0
    memcpy(all + (size_t)s * (size_t)n, mpi.jg_all + (size_t)mpi.base[s] * (size_t)n,
           (size_t)n * sizeof *all);
}

static void t_barrier(void) {
  MPI_Request r;
  pr_mpi_check(MPI_Ibarrier(mpi.ctl, &r), "MPI_Ibarrier");
  wait_request(&r, ON_EVERY, "at a barrier (every rank takes part)");
}

// Chunks of at most 1 GiB (MPI counts are int).
static void t_gather(void *buf, int64_t bytes, int from, int to) {
  int me = mpi.c->rank;
  if (from == to || (me != from && me != to)) return;
  const int64_t chunk = (int64_t)1 << 30;
  for (int64_t off = 0; off < bytes; off += chunk) {
    int n = (int)(bytes - off < chunk ? bytes - off : chunk);
    MPI_Request r;
    if (me == from) {
      pr_mpi_check(MPI_Isend((char *)buf + off, n, MPI_BYTE, to, 0, mpi.ctl, &r), "MPI_Isend");
      const int w = world_of(mpi.ag.world, to);
      wait_request(&r, w, "to send checkpoint or evaluation data to rank %d", w);
    } else {
      pr_mpi_check(MPI_Irecv((char *)buf + off, n, MPI_BYTE, from, 0, mpi.ctl, &r), "MPI_Irecv");
      const int w = world_of(mpi.ag.world, from);
      wait_request(&r, w, "for checkpoint or evaluation data from rank %d", w);
    }
  }
}

// Frees the replicas' all-gather's persistent requests (inactive: replica_wait waited for them).
static void replica_free(void) {
  for (int k = 0; k < 2 * mpi.rg_nb * (mpi.replicas - 1); k++)
    pr_mpi_check(MPI_Request_free(&mpi.rg_req[k]), "MPI_Request_free");
  free(mpi.rg_req);
  free(mpi.rg_sent);
  mpi.rg_req = NULL, mpi.rg_sent = NULL, mpi.rg_nb = 0;
}

static void t_replica_setup(const void *mine, void *all, int64_t bytes, const int64_t *off,
                            int nb) {
  const int me = pr_replica, D = mpi.replicas;
  prCheck(bytes >= 0 && bytes <= INT32_MAX, "use more stages (smaller stages) with --replicas",
          "the gradients of this rank's stages are %lld bytes; the replicas' exchange moves at "
          "most 2^31 - 1 bytes",
          (long long)bytes);
  void *ub = NULL;
  int flag = 0;
  pr_mpi_check(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag), "MPI_Comm_get_attr");
  prCheck(nb >= 1 && nb + 1 <= (flag ? *(int *)ub : 32767) && off[0] == 0 && off[nb] == bytes,
          "a bug in the generated program",
          "the replicas' exchange: %d buckets over %lld bytes are not valid here", nb,
          (long long)bytes);
  replica_free();
  mpi.rg_req = malloc(2 * (size_t)nb * (size_t)(D - 1) * sizeof *mpi.rg_req + 1);
  mpi.rg_sent = calloc((size_t)nb, sizeof *mpi.rg_sent);
  prCheck(mpi.rg_req && mpi.rg_sent, "the machine is out of memory",
          "cannot allocate the MPI requests");
  for (int k = 0; k < nb; k++) {
    int n = (int)(off[k + 1] - off[k]);
    for (int d = 0, j = 0; d < D; d++) {
      if (d == me) continue;
      pr_mpi_check(MPI_Recv_init((char *)all + (size_t)d * (size_t)bytes + off[k], n, MPI_BYTE, d,
                                 2 + k, mpi.rep, &mpi.rg_req[k * (D - 1) + j]),
                   "MPI_Recv_init");
      pr_mpi_check(MPI_Send_init((const char *)mine + off[k], n, MPI_BYTE, d, 2 + k, mpi.rep,
                                 &mpi.rg_req[(nb + k) * (D - 1) + j]),
                   "MPI_Send_init");
      j++;
    }
  }
  mpi.rg_mine = mine, mpi.rg_all = all, mpi.rg_bytes = bytes, mpi.rg_nb = nb;
}

static void t_replica_recv(void) {
  prCheck(mpi.rg_nb > 0 && !mpi.rg_active, "a bug in the runtime",
          "replica_recv: the exchange is %s", mpi.rg_nb ? "already started" : "not set up");
  pr_mpi_check(MPI_Startall(mpi.rg_nb * (mpi.replicas - 1), mpi.rg_req), "MPI_Startall");
  memset(mpi.rg_sent, 0, (size_t)mpi.rg_nb * sizeof *mpi.rg_sent);
  mpi.rg_active = true;
}

static void t_replica_send(int k) {
  prCheck(mpi.rg_active && k >= 0 && k < mpi.rg_nb && !mpi.rg_sent[k], "a bug in the runtime",
          "replica_send: bucket %d of %d cannot be sent now", k, mpi.rg_nb);
  const int n = mpi.replicas - 1;
  pr_mpi_check(MPI_Startall(n, &mpi.rg_req[(mpi.rg_nb + k) * n]), "MPI_Startall");
  mpi.rg_sent[k] = true;
  // Progress for the buckets in flight (Open MPI moves a message only inside MPI calls; the
  // requests not started yet count as complete here and stay as they are).
  int done = 0;
  pr_mpi_check(MPI_Testall(2 * mpi.rg_nb * n, mpi.rg_req, &done, MPI_STATUSES_IGNORE),
               "MPI_Testall");
}

static void t_replica_wait(void) {
  const int D = mpi.replicas, nb = mpi.rg_nb;
  prCheck(mpi.rg_active, "a bug in the runtime", "replica_wait: no exchange is started");
  for (int k = 0; k < nb; k++)
    prCheck(mpi.rg_sent[k], "a bug in the runtime", "replica_wait: bucket %d was never sent", k);
  for (int k = 0; k < 2 * nb * (D - 1); k++)
    wait_request(&mpi.rg_req[k], // (its replica: the (k mod (D - 1))-th other)
                 world_of(mpi.rep_w, k % (D - 1) + (k % (D - 1) >= pr_replica)),
                 "in the gradient exchange with the %d replicas of pipeline rank %d (bucket %d)", D,
                 mpi.c->rank, (k / (D - 1)) % nb);
  mpi.rg_active = false;
  memcpy((char *)mpi.rg_all + (size_t)pr_replica * (size_t)mpi.rg_bytes, mpi.rg_mine,
         (size_t)mpi.rg_bytes); // this replica's own part
  pr_stats.sent += mpi.rg_bytes * (D - 1);
  pr_stats.received += mpi.rg_bytes * (D - 1);
}

static void t_world_barrier(void) {
  MPI_Request r;
  pr_mpi_check(MPI_Ibarrier(mpi.world, &r), "MPI_Ibarrier");
  wait_request(&r, ON_EVERY, "at a barrier of every replica's ranks");
}

static void t_finish(void) {
  if (!mpi.started) return;
  pr_comm_wait_sends();
  t_barrier();
  if (mpi.world != MPI_COMM_NULL) t_world_barrier(); // replicated (either form)
  gather_free(&mpi.ag);
  MPI_Comm_free(&mpi.ctl);
  replica_free();
  probe_free();
  free(mpi.pipe_w);
  free(mpi.rep_w);
  free(mpi.ag.world);
  mpi.pipe_w = mpi.rep_w = mpi.ag.world = NULL;
  if (mpi.pipe != MPI_COMM_WORLD) MPI_Comm_free(&mpi.pipe);
  if (mpi.rep != MPI_COMM_NULL) MPI_Comm_free(&mpi.rep);
  if (mpi.world != MPI_COMM_NULL) MPI_Comm_free(&mpi.world);
  if (mpi.reps) { // the uneven form's
    gather_free(&mpi.jg);
    MPI_Comm_free(&mpi.jctl);
    free(mpi.jg.req);
    free(mpi.jg_all);
    free(mpi.base);
    mpi.reps = NULL, mpi.base = NULL, mpi.jg.req = NULL, mpi.jg_all = NULL;
  }
  pr_mpi_check(MPI_Finalize(), "MPI_Finalize");
  mpi.started = false;
  pr_transport = NULL;
  free(mpi.req);
  free(mpi.fin);
  free(mpi.idx);
  free(mpi.ag.req);
  mpi.req = NULL, mpi.ag.req = NULL, mpi.fin = NULL, mpi.idx = NULL, mpi.active = 0;
  mpi.c = NULL;
}

// Sanitizer builds: Open MPI does not free its own allocations (MPI_Init's, its components')
// at MPI_Finalize. The leak checker is told to record whole allocation stacks (the fast unwinder
// stops at Open MPI's frames, which lack frame pointers) and to ignore what Open MPI's libraries
// allocated; leaks of the program and the runtime are still reported. (Hooks the sanitizer
// runtime calls; dead code in other builds.)
const char *__lsan_default_options(void);
const char *__lsan_default_options(void) {
  return "fast_unwind_on_malloc=0:print_suppressions=0";
}
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) {
  return "leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\n"
         "leak:libevent\nleak:libhwloc.so\nleak:libucs.so\nleak:libucp.so\nleak:libfabric.so\n"
         "leak:mca_\n";
}

const PrTransport pr_transport_mpi = {
    "mpi",          t_start,         t_allgather,     t_barrier,      t_gather,
    t_abort,        t_finish,        t_replica_setup, t_replica_recv, t_replica_send,
    t_replica_wait, t_world_barrier, t_job_allgather};
