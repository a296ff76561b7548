// comm_nccl.cu: the pipeline's NCCL transport for device buffers (comm_nccl.h has the contract;
// libpipert_nccl.a). Never run on a GPU yet.
//
// Each (stream c, microbatch m) has a slot: its buffer, two events (ready: compute's point the
// NCCL operation waits for; done: the operation's completion on its link's stream), its
// state, and for a send the announcement's value and MPI request. A receive slot goes POSTED
// (buffer known) -> QUEUED (posted and announced by the sender: in the next group) -> ISSUED
// (its group launched) -> WAITED (compute waits for it) -> IDLE (pr_cu_comm_wait_sends saw it
// complete); a send slot goes QUEUED -> ISSUED -> WAITED -> IDLE likewise. Announcements from each
// peer arrive in its send order (MPI's non-overtaking rule on one communicator and tag) into a
// per-peer FIFO of slots; receives are queued from the FIFO's head only, so the k-th receive this
// rank issues on the link from a peer is the k-th message that peer sent on it.
#include "comm_nccl.h"

#define OMPI_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>

#include "cuda_check.h"
#include "pipert_cuda.h"

#include <sched.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

extern "C" {
#include "pipert.h"
}

enum { IDLE, POSTED, QUEUED, ISSUED, WAITED };

typedef struct Slot {
  void *buf;          // receive: the posted buffer; send: the source
  const char *action; // receive: what waits for it (the watchdog's message), NULL before
  cudaEvent_t ready;  // compute's point the NCCL operation waits for
  cudaEvent_t done;   // the operation's completion on the communication stream
  int state;          // IDLE .. WAITED
  int64_t note;       // send: the announcement (tag * nmicro + m), MPI_Isend's buffer
  MPI_Request req;    // send: the announcement's request
} Slot;

typedef struct Link {  // a directed pair of ranks: `from` sends, `to` receives, on their own
  int from, to;        // communicator (2 ranks: from is 0, to is 1) and stream
  ncclComm_t comm;     // NULL where this rank is neither
  cudaStream_t stream; // this rank's stream of the link
} Link;

typedef struct Peer { // announcements from one rank
  int64_t note;       // the posted MPI_Irecv's buffer
  MPI_Request req;    // that receive (always posted while started)
  int *fifo;          // announced slots not yet queued, in the peer's send order (a ring)
  int head, count;    // ring position and length
  int cap;            // ring size (this rank's receive slots from the peer)
} Peer;

static struct {
  const PrComm *c;    // the program's streams (NULL until start)
  Slot *slot;         // slot[c * nmicro + m]
  int *pend;          // slots queued for the next group, in call order
  int npend;          // count
  Peer *peer;         // per rank (this rank's own entry unused)
  Link *link;         // every link of the job, canonical order (from, then to, ascending)
  int nlink;          // count
  int *link_of;       // per stream: its link
  unsigned char *one; // a device byte (the links' first message)
  ncclComm_t nc;      // the job's communicator (all ranks): collectives
  cudaStream_t cs;    // the collectives' stream
  cudaEvent_t coll;   // a collective's completion
  cudaEvent_t cpt;    // compute's point a collective waits for
  MPI_Comm ctl;       // announcements (a duplicate of MPI_COMM_WORLD)
  double timeout;     // watchdog, seconds (0 = off)
  bool yield;         // sched_yield between polls (oversubscribed cores)
} nx;
static int device = -1; // this rank's GPU (-1 before start)

static const char *const HINT_TIMEOUT =
    "a rank is stopped, crashed or deadlocked, or merely slower than --timeout allows: raise "
    "--timeout SECONDS (0 = off) if it is only slow";
static const char *const HINT_BUG = "a bug in the generated program";
static const char *const HINT_START = "call pr_main first (it starts the transport)";
enum { TAG_NOTE = 1 }; // the announcements' MPI tag on nx.ctl

static cudaStream_t compute(void) {
  return (cudaStream_t)pr_cu_stream();
}

// The watchdog of one wait that began at t0: stops the job once it has lasted --timeout.
__attribute__((format(printf, 3, 4))) static void watchdog(double t0, long polls, const char *fmt,
                                                           ...) {
  if (nx.yield) sched_yield();
  if (nx.timeout <= 0 || (polls & 63) != 63 || pr_now() - t0 <= nx.timeout) return;
  char what[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  pr_fail(__FILE__, __LINE__, HINT_TIMEOUT, "timeout: waited %g s %s", nx.timeout, what);
}

// true once e completed; stops on a CUDA error (an asynchronous failure of the NCCL kernel).
static bool event_done(cudaEvent_t e) {
  cudaError_t r = cudaEventQuery(e);
  if (r == cudaErrorNotReady) return false;
  cudaCheck(r);
  return true;
}

static Slot *slot_of(int c, int m, bool send, const char *fn) {
  prCheck(nx.c != NULL, HINT_START, "%s: the transport is not started", fn);
  prCheck(c >= 0 && c < nx.c->nch && m >= 0 && m < nx.c->nmicro, HINT_BUG,
          "%s: no stream %d, microbatch %d (the program has %d streams of %d microbatches)", fn, c,
          m, nx.c->nch, nx.c->nmicro);
  prCheck(nx.c->ch[c].send == send, HINT_BUG, "%s: stream %d ('%s') is a %s stream", fn, c,
          nx.c->ch[c].tensor, nx.c->ch[c].send ? "send" : "receive");
  return &nx.slot[(int64_t)c * nx.c->nmicro + m];
}

static int index_of(const Slot *s) {
  return (int)(s - nx.slot);
}
static const PrChannel *chan_of(int i) {
  return &nx.c->ch[i / nx.c->nmicro];
}

static void queue(int i) {
  nx.slot[i].state = QUEUED;
  nx.pend[nx.npend++] = i;
}

// The receive slot of rank p's announcement `note`, checked.
static int announced_slot(int p, int64_t note) {
  const PrComm *c = nx.c;
  int64_t tag = note / c->nmicro, m = note % c->nmicro;
  for (int k = 0; k < c->nch; k++)
    if (!c->ch[k].send && c->ch[k].peer == p && c->ch[k].tag == tag) {
      int i = k * c->nmicro + (int)m;
      Peer *q = &nx.peer[p];
      for (int j = 0; j < q->count; j++)
        prCheck(q->fifo[(q->head + j) % q->cap] != i, HINT_BUG,
                "rank %d sent tensor '%s' microbatch %d again before this rank received it", p,
                c->ch[k].tensor, (int)m);
      return i;
    }
  pr_fail(__FILE__, __LINE__, HINT_BUG,
          "rank %d sent a message of stream tag %lld, microbatch %lld, which this rank does not "
          "receive",
          p, (long long)tag, (long long)m);
}

void pr_cu_comm_progress(void) {
  prCheck(nx.c != NULL, HINT_START, "pr_cu_comm_progress: the transport is not started");
  for (int p = 0; p < nx.c->nranks; p++) {
    Peer *q = &nx.peer[p];
    if (q->cap == 0) continue; // this rank receives nothing from p
    for (;;) {
      int done = 0;
      pr_mpi_check(MPI_Test(&q->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
      if (!done) break;
      prCheck(q->count < q->cap, HINT_BUG,
              "rank %d announced more messages than this rank has slots", p);
      q->fifo[(q->head + q->count++) % q->cap] = announced_slot(p, q->note);
      pr_mpi_check(MPI_Irecv(&q->note, 1, MPI_INT64_T, p, TAG_NOTE, nx.ctl, &q->req), "MPI_Irecv");
    }
    while (q->count > 0 && nx.slot[q->fifo[q->head]].state == POSTED) {
      queue(q->fifo[q->head]);
      q->head = (q->head + 1) % q->cap, q->count--;
    }
  }
}

// Launches the queued sends and receives: per link, its queued messages (all sends or all
// receives: the link's direction) as one group on the link's stream, in queue order.
static void flush(void) {
  if (nx.npend == 0) return;
  for (int l = 0; l < nx.nlink; l++) {
    const Link *L = &nx.link[l];
    int n = 0;
    for (int k = 0; k < nx.npend; k++) {
      if (nx.link_of[nx.pend[k] / nx.c->nmicro] != l) continue;
      cudaCheck(cudaStreamWaitEvent(L->stream, nx.slot[nx.pend[k]].ready, 0));
      n++;
    }
    if (n == 0) continue;
    ncclCheck(ncclGroupStart());
    for (int k = 0; k < nx.npend; k++) {
      if (nx.link_of[nx.pend[k] / nx.c->nmicro] != l) continue;
      const Slot *s = &nx.slot[nx.pend[k]];
      const PrChannel *ch = chan_of(nx.pend[k]);
      if (ch->bytes == 0) continue;
      if (ch->send)
        ncclCheck(ncclSend(s->buf, (size_t)ch->bytes, ncclUint8, 1, L->comm, L->stream));
      else
        ncclCheck(ncclRecv(s->buf, (size_t)ch->bytes, ncclUint8, 0, L->comm, L->stream));
    }
    ncclCheck(ncclGroupEnd());
    for (int k = 0; k < nx.npend; k++) {
      if (nx.link_of[nx.pend[k] / nx.c->nmicro] != l) continue;
      Slot *s = &nx.slot[nx.pend[k]];
      cudaCheck(cudaEventRecord(s->done, L->stream));
      s->state = ISSUED;
    }
  }
  nx.npend = 0;
}

void pr_cu_comm_post_recv(int c, int m, void *buf) {
  Slot *s = slot_of(c, m, false, "pr_cu_comm_post_recv");
  prCheck(s->state == IDLE || s->state == WAITED, HINT_BUG,
          "pr_cu_comm_post_recv: '%s' microbatch %d is already posted", nx.c->ch[c].tensor, m);
  s->buf = buf;
  s->action = NULL;
  s->state = POSTED;
  cudaCheck(cudaEventRecord(s->ready, compute())); // the slot's previous readers are done
  pr_cu_comm_progress();
  flush(); // a link has its own stream: an early receive blocks nothing else
}

void pr_cu_comm_wait_recv(int c, int m, const char *action) {
  Slot *s = slot_of(c, m, false, "pr_cu_comm_wait_recv");
  const PrChannel *ch = &nx.c->ch[c];
  prCheck(s->state != IDLE && s->state != WAITED, HINT_BUG,
          "pr_cu_comm_wait_recv: '%s' microbatch %d was never posted (%s)", ch->tensor, m, action);
  s->action = action;
  double t0 = nx.timeout > 0 ? pr_now() : 0, tw = pr_now();
  for (long polls = 0; s->state == POSTED; polls++) {
    pr_cu_comm_progress();
    if (s->state != POSTED) break;
    // Announced behind a message whose receive is not posted: NCCL would deliver that one first.
    const Peer *q = &nx.peer[ch->peer];
    for (int j = 1; j < q->count; j++)
      if (q->fifo[(q->head + j) % q->cap] == index_of(s)) {
        const PrChannel *h = chan_of(q->fifo[q->head]);
        pr_fail(__FILE__, __LINE__,
                "the NCCL transport delivers a peer's messages in its send order: compile with "
                "--comm mpi, or report the schedule as a pipec bug",
                "rank %d sent tensor '%s' microbatch %d before tensor '%s' microbatch %d, but this "
                "rank waits for the second (%s) before posting the receive of the first",
                ch->peer, h->tensor, q->fifo[q->head] % nx.c->nmicro, ch->tensor, m, action);
      }
    watchdog(t0, polls, "for tensor '%s' microbatch %d from rank %d (%s)", ch->tensor, m, ch->peer,
             action);
  }
  flush(); // this receive and the sends queued since the last flush, one group per link
  cudaCheck(cudaStreamWaitEvent(compute(), s->done, 0));
  s->state = WAITED;
  pr_stats.recv_wait += pr_now() - tw; // the host's wait for the announcement; the data's is the
  pr_stats.received += ch->bytes;      // device's (compute waits for the receive's event)
}

// Waits (under the watchdog) until send slot s's announcement of (ch, m) to the peer is out:
// MPI's eager path, at once unless the control messages back up.
static void wait_announced(Slot *s, const PrChannel *ch, int m) {
  double t0 = nx.timeout > 0 ? pr_now() : 0;
  for (long polls = 0;; polls++) {
    int done = 0;
    pr_mpi_check(MPI_Test(&s->req, &done, MPI_STATUS_IGNORE), "MPI_Test");
    if (done) break;
    watchdog(t0, polls, "to announce tensor '%s' microbatch %d to rank %d", ch->tensor, m,
             ch->peer);
  }
}

void pr_cu_comm_send(int c, int m, const void *buf) {
  Slot *s = slot_of(c, m, true, "pr_cu_comm_send");
  const PrChannel *ch = &nx.c->ch[c];
  prCheck(s->state == IDLE || s->state == WAITED, HINT_BUG,
          "pr_cu_comm_send: '%s' microbatch %d is still being sent", ch->tensor, m);
  wait_announced(s, ch, m); // the previous announcement of this slot
  s->buf = (void *)buf;
  cudaCheck(cudaEventRecord(s->ready, compute())); // after the producing kernel
  s->note = (int64_t)ch->tag * nx.c->nmicro + m;
  pr_mpi_check(MPI_Isend(&s->note, 1, MPI_INT64_T, ch->peer, TAG_NOTE, nx.ctl, &s->req),
               "MPI_Isend");
  queue(index_of(s));
  pr_stats.sent += ch->bytes;
}

void pr_cu_comm_wait_send(int c, int m) {
  Slot *s = slot_of(c, m, true, "pr_cu_comm_wait_send");
  if (s->state == IDLE || s->state == WAITED) return;
  if (s->state == QUEUED) flush();
  cudaCheck(cudaStreamWaitEvent(compute(), s->done, 0)); // before the kernel rewriting the buffer
  s->state = WAITED;
}

void pr_cu_comm_wait_sends(void) {
  prCheck(nx.c != NULL, HINT_START, "pr_cu_comm_wait_sends: the transport is not started");
  pr_cu_comm_progress();
  flush();
  int n = nx.c->nch * nx.c->nmicro;
  for (int i = 0; i < n; i++) {
    Slot *s = &nx.slot[i];
    const PrChannel *ch = chan_of(i);
    int m = i % nx.c->nmicro;
    if (ch->send) wait_announced(s, ch, m);
    if (s->state != ISSUED && s->state != WAITED) continue;
    // A receive issued but not waited for stays (its wait makes compute wait for it).
    if (!ch->send && s->state == ISSUED) continue;
    double t0 = nx.timeout > 0 ? pr_now() : 0;
    for (long polls = 0; !event_done(s->done); polls++) {
      if (ch->send)
        watchdog(t0, polls, "to send tensor '%s' microbatch %d to rank %d", ch->tensor, m,
                 ch->peer);
      else
        watchdog(t0, polls, "for tensor '%s' microbatch %d from rank %d (%s)", ch->tensor, m,
                 ch->peer, s->action ? s->action : "?");
      pr_cu_comm_progress(); // a peer's group may wait for a receive only announced now
      flush();
    }
    s->state = IDLE;
  }
}

// ---------------------------------------------------------------------------------------------
// Collectives and transfers (device buffers, nothing outstanding)

static void quiet(const char *fn) {
  prCheck(nx.c != NULL, HINT_START, "%s: the transport is not started", fn);
  int n = nx.c->nch * nx.c->nmicro;
  for (int i = 0; i < n; i++)
    prCheck(nx.slot[i].state == IDLE, HINT_BUG,
            "%s with tensor '%s' microbatch %d outstanding (call pr_cu_comm_wait_sends first)", fn,
            chan_of(i)->tensor, i % nx.c->nmicro);
  cudaCheck(cudaEventRecord(nx.cpt, compute()));
  cudaCheck(cudaStreamWaitEvent(nx.cs, nx.cpt, 0));
}

// Compute waits for the collective, and the host too (watchdog).
__attribute__((format(printf, 1, 2))) static void finish_collective(const char *fmt, ...) {
  char what[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  cudaCheck(cudaEventRecord(nx.coll, nx.cs));
  cudaCheck(cudaStreamWaitEvent(compute(), nx.coll, 0));
  double t0 = nx.timeout > 0 ? pr_now() : 0;
  for (long polls = 0; !event_done(nx.coll); polls++) watchdog(t0, polls, "%s", what);
}

void pr_cu_comm_allgather(const double *mine_dev, double *all_dev, int n) {
  quiet("pr_cu_comm_allgather");
  ncclCheck(ncclAllGather(mine_dev, all_dev, (size_t)n, ncclFloat64, nx.nc, nx.cs));
  finish_collective("in an all-gather with every rank (the start, or a step's end)");
}

void pr_cu_comm_broadcast(void *buf_dev, int64_t bytes, int root) {
  quiet("pr_cu_comm_broadcast");
  ncclCheck(ncclBroadcast(buf_dev, buf_dev, (size_t)bytes, ncclUint8, root, nx.nc, nx.cs));
  finish_collective("in a broadcast from rank %d", root);
}

void pr_cu_comm_transfer(void *buf_dev, int64_t bytes, int from, int to) {
  prCheck(nx.c != NULL, HINT_START, "pr_cu_comm_transfer: the transport is not started");
  int me = nx.c->rank;
  if (from == to || (me != from && me != to)) return;
  quiet("pr_cu_comm_transfer");
  if (me == from) {
    ncclCheck(ncclSend(buf_dev, (size_t)bytes, ncclUint8, to, nx.nc, nx.cs));
    finish_collective("to send checkpoint data to rank %d", to);
  } else {
    ncclCheck(ncclRecv(buf_dev, (size_t)bytes, ncclUint8, from, nx.nc, nx.cs));
    finish_collective("for checkpoint data from rank %d", from);
  }
}

// ---------------------------------------------------------------------------------------------
// Start and end

int pr_cu_comm_device(void) {
  return device;
}
void *pr_cu_comm_stream(void) {
  return (void *)nx.cs;
}

// This rank's index among the ranks on its machine, and their number (MPI's shared-memory split;
// OMPI_COMM_WORLD_LOCAL_RANK, where set, picks the device as the launcher meant).
static void local_rank(int rank, int *local, int *nlocal) {
  MPI_Comm node;
  pr_mpi_check(
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node),
      "MPI_Comm_split_type");
  pr_mpi_check(MPI_Comm_rank(node, local), "MPI_Comm_rank");
  pr_mpi_check(MPI_Comm_size(node, nlocal), "MPI_Comm_size");
  MPI_Comm_free(&node);
  const char *s = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (s && *s) *local = atoi(s);
}

// What every rank learns of every other at start: its machine and its GPU.
typedef struct Where {
  char host[64];     // gethostname
  char uuid[16];     // the GPU's cudaDeviceProp.uuid
  int device, count; // device index, GPUs the rank sees
} Where;

static void select_device(const PrComm *c) {
  int local = 0, nlocal = 1;
  local_rank(c->rank, &local, &nlocal);
  Where me;
  memset(&me, 0, sizeof me);
  gethostname(me.host, sizeof me.host - 1);
  cudaError_t e = cudaGetDeviceCount(&me.count);
  if (e != cudaSuccess) me.count = 0;
  prCheck(me.count > 0,
          "run on machines with an NVIDIA GPU per rank (nvidia-smi lists them), or compile with "
          "--comm mpi / for the CPU",
          "no CUDA device on %s: %s", me.host,
          e == cudaSuccess ? "none found" : cudaGetErrorString(e));
  prCheck(
      local < me.count,
      "run at most one rank per GPU on each machine (fewer ranks, or more machines), or "
      "--comm mpi to share a GPU",
      "%s has %d GPU%s but runs %d ranks of this job: rank %d (local rank %d) has no GPU of its "
      "own",
      me.host, me.count, me.count == 1 ? "" : "s", nlocal, c->rank, local);
  me.device = local;
  cudaCheck(cudaSetDevice(local));
  cudaDeviceProp prop;
  cudaCheck(cudaGetDeviceProperties(&prop, local));
  memcpy(me.uuid, &prop.uuid, sizeof me.uuid);
  Where *all = (Where *)calloc((size_t)c->nranks, sizeof *all);
  prCheck(all != NULL, "the machine is out of memory", "cannot allocate the ranks' devices");
  pr_mpi_check(MPI_Allgather(&me, (int)sizeof me, MPI_BYTE, all, (int)sizeof me, MPI_BYTE, nx.ctl),
               "MPI_Allgather");
  for (int r = 0; r < c->nranks; r++)
    if (r != c->rank && strcmp(all[r].host, me.host) == 0 &&
        memcmp(all[r].uuid, me.uuid, sizeof me.uuid) == 0) {
      int lo = r < c->rank ? r : c->rank, hi = r < c->rank ? c->rank : r;
      free(all);
      pr_fail(__FILE__, __LINE__,
              "give each rank its own GPU (CUDA_VISIBLE_DEVICES), or compile with --comm mpi "
              "(host-staged) to run several ranks on one GPU",
              "ranks %d and %d both use GPU %d of %s: NCCL does not support two ranks on one GPU",
              lo, hi, me.device, me.host);
    }
  free(all);
  device = local;
}

// The links: which rank sends to which (an all-gather of every rank's send peers, checked against
// this rank's receives), then for each link in canonical order a 2-rank communicator split from
// the job's (every rank takes part in every split) and its first 1-byte message, so that NCCL's
// connections are all made here, one link at a time in the same order on every rank, never
// lazily inside a step.
static void make_links(const PrComm *c) {
  int S = c->nranks, me = c->rank;
  int *sends = (int *)calloc((size_t)S * (size_t)S, sizeof(int)); // sends[from * S + to]
  int *mine = (int *)calloc((size_t)S, sizeof(int));
  nx.link_of = (int *)calloc((size_t)(c->nch > 0 ? c->nch : 1), sizeof(int));
  prCheck(sends && mine && nx.link_of, "the machine is out of memory",
          "cannot allocate the NCCL links");
  for (int k = 0; k < c->nch; k++)
    if (c->ch[k].send) mine[c->ch[k].peer] = 1;
  pr_mpi_check(MPI_Allgather(mine, S, MPI_INT, sends, S, MPI_INT, nx.ctl), "MPI_Allgather");
  free(mine);
  for (int k = 0; k < c->nch; k++)
    prCheck(c->ch[k].send || sends[c->ch[k].peer * S + me], HINT_BUG,
            "this rank receives tensor '%s' from rank %d, which sends nothing to it",
            c->ch[k].tensor, c->ch[k].peer);
  nx.nlink = 0;
  for (int i = 0; i < S * S; i++) nx.nlink += sends[i] != 0;
  nx.link = (Link *)calloc((size_t)(nx.nlink > 0 ? nx.nlink : 1), sizeof(Link));
  prCheck(nx.link != NULL, "the machine is out of memory", "cannot allocate the NCCL links");
  cudaCheck(cudaMalloc((void **)&nx.one, 256));
  cudaCheck(cudaMemset(nx.one, 0, 256));
  int l = 0;
  for (int from = 0; from < S; from++)
    for (int to = 0; to < S; to++) {
      if (!sends[from * S + to]) continue;
      Link *L = &nx.link[l];
      *L = (Link){from, to, NULL, NULL};
      bool member = me == from || me == to;
      ncclCheck(ncclCommSplit(nx.nc, member ? 0 : NCCL_SPLIT_NOCOLOR, me == from ? 0 : 1, &L->comm,
                              NULL));
      if (member) {
        cudaCheck(cudaStreamCreateWithFlags(&L->stream, cudaStreamNonBlocking));
        if (me == from)
          ncclCheck(ncclSend(nx.one, 1, ncclUint8, 1, L->comm, L->stream));
        else
          ncclCheck(ncclRecv(nx.one + 128, 1, ncclUint8, 0, L->comm, L->stream));
        double t0 = nx.timeout > 0 ? pr_now() : 0;
        cudaEvent_t e;
        cudaCheck(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
        cudaCheck(cudaEventRecord(e, L->stream));
        for (long polls = 0; !event_done(e); polls++)
          watchdog(t0, polls, "to connect rank %d to rank %d (the start)", from, to);
        cudaCheck(cudaEventDestroy(e));
      }
      for (int k = 0; k < c->nch; k++)
        if ((c->ch[k].send && from == me && to == c->ch[k].peer) ||
            (!c->ch[k].send && to == me && from == c->ch[k].peer))
          nx.link_of[k] = l;
      l++;
    }
  free(sends);
}

static int t_start(const PrComm *c, int *argc, char ***argv, double timeout) {
  int local = pr_transport_mpi.start(c, argc, argv, timeout);
  pr_transport = &pr_transport_nccl;
  pr_mpi_check(MPI_Comm_dup(MPI_COMM_WORLD, &nx.ctl), "MPI_Comm_dup");
  nx.timeout = timeout;
  const char *y = getenv("OMPI_MCA_mpi_yield_when_idle");
  nx.yield = y && strcmp(y, "1") == 0;
  select_device(c);
  // The one communicator, eagerly, in the same order everywhere.
  ncclUniqueId id;
  memset(&id, 0, sizeof id);
  if (c->rank == 0) ncclCheck(ncclGetUniqueId(&id));
  pr_mpi_check(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, nx.ctl), "MPI_Bcast");
  ncclCheck(ncclCommInitRank(&nx.nc, c->nranks, id, c->rank));
  cudaCheck(cudaStreamCreateWithFlags(&nx.cs, cudaStreamNonBlocking));
  cudaCheck(cudaEventCreateWithFlags(&nx.coll, cudaEventDisableTiming));
  cudaCheck(cudaEventCreateWithFlags(&nx.cpt, cudaEventDisableTiming));
  make_links(c);
  int n = c->nch * c->nmicro;
  nx.slot = (Slot *)calloc((size_t)(n > 0 ? n : 1), sizeof *nx.slot);
  nx.pend = (int *)calloc((size_t)(n > 0 ? n : 1), sizeof *nx.pend);
  nx.peer = (Peer *)calloc((size_t)c->nranks, sizeof *nx.peer);
  prCheck(nx.slot && nx.pend && nx.peer, "the machine is out of memory",
          "cannot allocate the NCCL transport's slots");
  for (int i = 0; i < n; i++) {
    Slot *s = &nx.slot[i];
    cudaCheck(cudaEventCreateWithFlags(&s->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming));
    s->req = MPI_REQUEST_NULL;
  }
  for (int k = 0; k < c->nch; k++)
    if (!c->ch[k].send) nx.peer[c->ch[k].peer].cap += c->nmicro;
  for (int p = 0; p < c->nranks; p++) {
    Peer *q = &nx.peer[p];
    q->req = MPI_REQUEST_NULL;
    if (q->cap == 0) continue;
    q->fifo = (int *)calloc((size_t)q->cap, sizeof *q->fifo);
    prCheck(q->fifo != NULL, "the machine is out of memory", "cannot allocate the NCCL transport");
    pr_mpi_check(MPI_Irecv(&q->note, 1, MPI_INT64_T, p, TAG_NOTE, nx.ctl, &q->req), "MPI_Irecv");
  }
  nx.c = c;
  return local;
}

static void t_allgather(const double *mine, double *all, int n) {
  pr_transport_mpi.allgather(mine, all, n);
}
static void t_barrier(void) {
  pr_transport_mpi.barrier();
}
static void t_gather(void *buf, int64_t bytes, int from, int to) {
  pr_transport_mpi.gather(buf, bytes, from, to);
}
__attribute__((noreturn)) static void t_abort(int status) {
  pr_transport_mpi.abort(status); // MPI_Abort: NCCL kernels may be stuck; no ncclCommAbort first
}

static void t_finish(void) {
  if (!nx.c) return;
  pr_cu_comm_wait_sends();
  t_barrier(); // every rank's messages are complete before the announcements' receives go
  const PrComm *c = nx.c;
  for (int p = 0; p < c->nranks; p++) {
    Peer *q = &nx.peer[p];
    if (q->req != MPI_REQUEST_NULL) {
      pr_mpi_check(MPI_Cancel(&q->req), "MPI_Cancel");
      pr_mpi_check(MPI_Wait(&q->req, MPI_STATUS_IGNORE), "MPI_Wait");
    }
    free(q->fifo);
  }
  for (int l = 0; l < nx.nlink; l++)
    if (nx.link[l].comm) cudaCheck(cudaStreamSynchronize(nx.link[l].stream));
  for (int i = 0; i < c->nch * c->nmicro; i++) {
    cudaCheck(cudaEventDestroy(nx.slot[i].ready));
    cudaCheck(cudaEventDestroy(nx.slot[i].done));
  }
  cudaCheck(cudaEventDestroy(nx.coll));
  cudaCheck(cudaEventDestroy(nx.cpt));
  for (int l = 0; l < nx.nlink; l++) {
    Link *L = &nx.link[l];
    if (!L->comm) continue;
    cudaCheck(cudaStreamSynchronize(L->stream));
    ncclCheck(ncclCommDestroy(L->comm));
    cudaCheck(cudaStreamDestroy(L->stream));
  }
  cudaCheck(cudaFree(nx.one));
  cudaCheck(cudaStreamSynchronize(nx.cs));
  ncclCheck(ncclCommDestroy(nx.nc));
  cudaCheck(cudaStreamDestroy(nx.cs));
  free(nx.link);
  free(nx.link_of);
  nx.link = NULL, nx.link_of = NULL, nx.nlink = 0;
  MPI_Comm_free(&nx.ctl);
  free(nx.slot);
  free(nx.pend);
  free(nx.peer);
  nx.slot = NULL, nx.pend = NULL, nx.peer = NULL, nx.c = NULL, nx.npend = 0;
  pr_transport_mpi.finish(); // MPI_Finalize; pr_transport = NULL
}

extern "C" const PrTransport pr_transport_nccl = {"nccl",   t_start, t_allgather, t_barrier,
                                                  t_gather, t_abort, t_finish,
                                                  NULL,     NULL,    NULL,
                                                  NULL,     NULL,    NULL}; // no replicas (comm.h)
