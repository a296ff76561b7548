// comm.h: how the rank programs of a pipeline (S > 1) talk to each other.
//
// A rank program describes its message streams in a PrComm (PrProgram.comm; NULL for a one-rank
// program, which then needs no MPI at all). Each stream carries one message per microbatch m
// (0 .. nmicro-1) per step, always of the same size, between this rank and one peer; its wire
// tag is tag * nmicro + m, so that messages of different streams and microbatches never match
// each other and each (stream, m) has one preallocated request. The generated code posts
// receives early (pr_comm_post_recv), sends without blocking (pr_comm_send) and waits where the
// schedule needs the data (pr_comm_wait_recv) or the buffer back (pr_comm_wait_send); a wait that
// lasts longer than --timeout seconds stops the job naming the tensor, microbatch, peer and action,
// and the ranks (world ranks) that do not respond to a probe of the job.
//
// The transport (comm_mpi.c, in libpipert_mpi.a, over Open MPI) also serves the training loop
// (trainloop.c): the step end's all-gather of the loss and the per-parameter sums of squares, the
// checkpoint's transfers to the saving rank, barriers, and aborting the whole job on an error.
#ifndef PIPERT_COMM_H
#define PIPERT_COMM_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus // the CUDA transport (runtime/cuda/comm_nccl.cu) includes it from C++
extern "C" {
#endif

typedef struct PrChannel { // one message stream of this rank
  const char *tensor;      // the tensor's name (watchdog and error messages)
  int peer;                // the other rank
  int tag;                 // stream tag, the same on both sides (wire tag = tag * nmicro + m)
  int64_t bytes;           // bytes per message
  bool send;               // this rank sends on it (else receives)
} PrChannel;

typedef struct PrTransport PrTransport;    // a transport's operations (comm_mpi.c defines one)
extern const PrTransport pr_transport_mpi; // in libpipert_mpi.a

typedef struct PrComm {         // how a rank program talks to the others (PrProgram.comm)
  int rank, nranks;             // this program's rank and the job's size, fixed at compile time
  int report_rank;              // the rank that computes the loss: prints progress and evaluation
  int save_rank;                // the rank that writes checkpoints and the loss log (0)
  const PrChannel *ch;          // its message streams: channels and exchange messages
  int nch;                      // count
  int nmicro;                   // M (messages per stream per step: m = 0..M-1; eval uses m = 0)
  const PrTransport *transport; // &pr_transport_mpi
  int replicas;                 // D copies of the pipeline (--replicas; 0 or 1: one): the job
                                // has nranks x D processes, replica d's rank at d * nranks + rank
  // --replicas: the buckets of the replicas' gradient exchange, in the order their gradients
  // become final on this rank (replicas.c): bucket k is the parameters rep_param[rep_end[k - 1]
  // .. rep_end[k]) (rep_end[-1] = 0), each a parameter-table index; the program calls
  // pr_replicas_ready(k) after the kernel (or the tied sums' action) that makes them final.
  const int *rep_param; // every parameter this rank trains, bucket by bucket
  const int *rep_end;   // per bucket: the end of its run in rep_param
  int rep_nbuckets;     // buckets (0: none, every gradient exchanged at the step end)
  // PipeDream's uneven replication (--replicas D0,D1,.. with counts that differ; replicas is
  // then 1): per pipeline rank s its count D_s (NULL: none). The job has D_0 + .. + D_{S-1}
  // processes, stage by stage (replica r of rank s at world rank D_0 + .. + D_{s-1} + r); nmicro
  // is the step's M, replica r runs the microbatches m with m mod D_s = r, and a stream's
  // message m goes to the peer rank's replica m mod D_peer (its replica r when D_peer = D_s:
  // the step end's exchange streams, whose m is 0). Replica 0 of each rank saves and evaluates.
  const int *stage_reps;
  // The rank that counts an evaluation's correct predictions (the stage of the classification
  // node, compiler/training.c: training_accuracy); evaluate() brings its counts to report_rank.
  // -1: the model reports no accuracy.
  int accuracy_rank;
} PrComm;

// This rank's replica count: D, D_s of the uneven form, or 1.
static inline int pr_comm_replicas(const PrComm *c) {
  return !c ? 1 : c->stage_reps ? c->stage_reps[c->rank] : c->replicas > 1 ? c->replicas : 1;
}
// Whether the job replicates stages (either form).
static inline bool pr_comm_replicated(const PrComm *c) {
  return c && (c->replicas > 1 || c->stage_reps);
}

// Called by generated code (comm_mpi.c implements; all check errors and never allocate):
void pr_comm_post_recv(int c, int m, void *buf); // MPI_Irecv into buf
void pr_comm_wait_recv(int c, int m,
                       const char *action);       // wait (watchdog); action e.g. "F(v1, m3)"
void pr_comm_send(int c, int m, const void *buf); // MPI_Isend from buf
void pr_comm_wait_send(int c, int m);             // wait for that send to complete
void pr_comm_wait_sends(void);                    // wait for all outstanding sends
// Lets MPI move the outstanding messages while the rank computes: tests every posted receive
// and pending send once (never blocks) and returns at once when none is outstanding. Printed
// between the kernels of compute actions (codegen/segment.c): over shared memory a large
// message completes only once its receiver is inside MPI. A request it completes still needs
// its wait (which then returns at once).
void pr_comm_progress(void);

// What the training loop needs of a transport. Every operation is collective over the job
// unless it says otherwise, and every wait in it obeys the watchdog (--timeout).
struct PrTransport {
  const char *name; // "mpi"
  // Joins the job as c->rank of c->nranks (stops, telling to use launch.sh, when the launcher
  // started it otherwise), preallocates a request per (stream, m) and arms the watchdog
  // (timeout seconds; 0 = off), which bounds this start itself too: a rank of the job that does
  // not come makes it stop within timeout. Returns how many ranks of the job run on this machine.
  int (*start)(const PrComm *c, int *argc, char ***argv, double timeout);
  // all[r * n + i] = rank r's mine[i], for every rank r.
  void (*allgather)(const double *mine, double *all, int n);
  void (*barrier)(void);
  // Point to point: rank `from` sends bytes of buf, rank `to` receives them into buf; the other
  // ranks do nothing (a no-op when from == to). Called in the same order on both sides (the
  // checkpoint's transfers, an evaluation's accuracy counts).
  void (*gather)(void *buf, int64_t bytes, int from, int to);
  // Ends the whole job now with status (every rank exits non-zero); never returns.
  void (*abort)(int status) __attribute__((noreturn));
  // Waits for outstanding sends, leaves the job (collective).
  void (*finish)(void);
  // With replicas (PrComm.replicas D > 1; NULL in a transport without them), everything above
  // is over this replica's nranks ranks (peers and ranks are pipeline ranks), and these span
  // more. The replicas' all-gather, in buckets (collective over the D replicas of this pipeline
  // rank): replica_setup makes the requests once for one replica's message mine of `bytes`
  // bytes, cut in nb buckets (bucket k: bytes off[k] .. off[k + 1]), replica d's landing at
  // all + d * bytes; each exchange is replica_recv (every receive started), replica_send(k) per
  // bucket (its sends started, once mine holds it) and replica_wait (every request completed:
  // then all[d * bytes ..] = replica d's mine). No allocation after the setup.
  void (*replica_setup)(const void *mine, void *all, int64_t bytes, const int64_t *off, int nb);
  void (*replica_recv)(void);
  void (*replica_send)(int k);
  void (*replica_wait)(void);
  // A barrier of the whole job (all S x D processes).
  void (*world_barrier)(void);
  // allgather, collective over every process of the job (the step end's, the run's statistics):
  // all[s * n + i] = pipeline rank s's mine[i]; with the uneven form, replica 0's of rank s
  // (NULL: allgather is that; allgather itself is then over the replica-0 ranks only, the
  // checkpoint's). pr_job_allgather calls the one there is.
  void (*job_allgather)(const double *mine, double *all, int n);
};

static inline void pr_job_allgather(const PrTransport *t, const double *mine, double *all, int n) {
  (t->job_allgather ? t->job_allgather : t->allgather)(mine, all, n);
}

// This process's replica d (0 .. D - 1; 0 without replicas), set by the transport's start; the
// generated data loaders offset their microbatches by pr_replica * M / D (replicas.c).
extern int pr_replica;
// Called by the generated program with replicas, right after the kernel of a stage's last B or W
// (or the TIED_SUM action) that makes bucket k's gradients final on this rank (PrComm.rep_param,
// codegen/buckets.c): starts sending it to the other replicas (replicas.c; nothing outside a
// step, or with PIPEC_REPLICAS_OVERLAP=0).
void pr_replicas_ready(int k);

// The transport of the running program once pr_main has started it (NULL: one rank, or not yet):
// pr_fail aborts the whole job through it.
extern const PrTransport *pr_transport;

// For the transports built over MPI (comm_mpi.c, cuda/comm_nccl.cu): stops the job when rc, the
// result of MPI call `call`, is not MPI_SUCCESS, naming the call and MPI's text for the error.
void pr_mpi_check(int rc, const char *call);

#ifdef __cplusplus
}
#endif

#endif
