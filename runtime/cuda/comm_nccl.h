// comm_nccl.h: the pipeline's transport for device buffers over NCCL (libpipert_nccl.a, built
// where CMake finds CUDA, NCCL and Open MPI; docs/cuda.md). The streams are comm.h's: the same
// PrChannel table in PrComm, the same five calls with a pr_cu_ prefix, placed by the generated
// program exactly where the CPU program places pr_comm_*, on device buffers. NOTHING HERE HAS
// RUN ON A GPU YET (no session had one); it compiles and links in CI.
//
// Start: pr_transport_nccl.start joins MPI (comm_mpi.c's start: rank and size checked, watchdog
// armed), picks device = the rank's local rank on its machine (OMPI_COMM_WORLD_LOCAL_RANK, else
// MPI's shared-memory split), stops with a clear error when the machine has fewer GPUs than
// ranks or two ranks share one GPU (NCCL does not support that: --comm mpi does), and creates
// the communicators eagerly, once, in one canonical order: one over the whole job (rank 0
// ncclGetUniqueId, MPI_Bcast, ncclCommInitRank; the collectives, on their own stream), then one
// per link (a directed pair of ranks with a stream from the first to the second), split from it
// in (from, to) order with its own stream, and its connection made by a first 1-byte message.
//
// Messages. NCCL has no tags: the k-th ncclSend on a link meets its k-th ncclRecv. So every
// pr_cu_comm_send also announces (tag, m) to the receiver over MPI (an 8-byte message on the
// transport's own communicator), and the receiver issues its receives on the link in the order
// they were announced: a stream's message always lands in its own buffer. A receive is issued
// once it is both posted and announced; one announced behind a receive not yet posted is waited
// for only after that one is posted (else a clear error: NCCL would fill the wrong buffer).
// Queued messages are issued at each post and wait (the sends of a schedule step together), one
// ncclGroupStart/End per link. A link carries one direction only on its own stream, so a send
// never waits behind a receive (or a message to another rank) on a shared stream: the only
// dependencies between ranks are the program's own, through compute. Ordering against the
// compute stream (pr_cu_stream()) is by events: a send's group waits for compute's event recorded
// at pr_cu_comm_send (after the producing kernel); a receive waits for compute's event recorded
// at pr_cu_comm_post_recv (the slot's previous reader is done); compute waits for a receive's
// completion event at pr_cu_comm_wait_recv and for a send's at pr_cu_comm_wait_send (before the
// kernel that rewrites the buffer). The host blocks only until the receive it waits for is
// announced, and in pr_cu_comm_wait_sends, which polls every issued message's event
// (cudaEventQuery) to completion; both obey --timeout with comm_mpi.c's messages (tensor,
// microbatch, peer rank, action) and abort the job.
//
// Host synchronisation inside a step other than through these calls (a cudaStreamSynchronize,
// a download) can deadlock where a peer's send waits for a receive this rank has posted but not
// yet issued: call pr_cu_comm_progress() before it.
#ifndef PIPERT_COMM_NCCL_H
#define PIPERT_COMM_NCCL_H

#include "comm.h"

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

extern const PrTransport pr_transport_nccl; // start/finish/abort; host allgather/barrier/gather
                                            // (host buffers) through comm_mpi.c

// The device this rank selected at start (its local rank), -1 before; pass it to pr_cu_init.
int pr_cu_comm_device(void);
// The collectives' stream (a cudaStream_t).
void *pr_cu_comm_stream(void);

// comm.h's stream calls on device buffers (check errors; never allocate).
void pr_cu_comm_post_recv(int c, int m, void *buf);
void pr_cu_comm_wait_recv(int c, int m, const char *action); // action: a string that lives on
void pr_cu_comm_send(int c, int m, const void *buf);
void pr_cu_comm_wait_send(int c, int m);
void pr_cu_comm_wait_sends(void); // also completes the receives waited for so far
// Takes announcements in and issues what is posted and announced (never blocks).
void pr_cu_comm_progress(void);

// Collectives on device buffers, with no message outstanding (after pr_cu_comm_wait_sends), in the
// same order on every rank. Each waits (host, watchdog) for its own completion.
// all_dev[r * n + i] = rank r's mine_dev[i] (doubles): the step end's [loss, sums of squares]
// vector; the caller downloads it and sums on the host in parameter order (pipeline.c's rule).
void pr_cu_comm_allgather(const double *mine_dev, double *all_dev, int n);
// bytes of buf_dev from rank root to every rank.
void pr_cu_comm_broadcast(void *buf_dev, int64_t bytes, int root);
// Rank `from` sends bytes of buf_dev to rank `to`; the others do nothing (from == to: nothing).
void pr_cu_comm_transfer(void *buf_dev, int64_t bytes, int from, int to);

#ifdef __cplusplus
}
#endif

#endif
