// test_comm_nccl.c: a hand-written rank program (no compiler involved) that drives the NCCL
// transport for device buffers (runtime/cuda/comm_nccl.h, libpipert_nccl.a) under mpirun;
// tests/cuda/comm_nccl.sh runs it. The job size comes from TEST_NCCL_RANKS (default 1), the rank
// from mpirun (OMPI_COMM_WORLD_RANK). argv[1] picks what it does:
//   gpus       prints the number of CUDA devices this process sees (0 on error); no MPI
//   unstarted  calls pr_cu_comm_send before any start (the "not started" error; no GPU needed)
//   start      starts the transport and finishes (the device checks: no GPU, too few, shared)
//   messages   2 ranks: three streams 0 -> 1 and one 1 -> 0 of different sizes, 4 microbatches,
//              3 steps; receives posted at step start, sends in descending microbatch order,
//              waits ascending: every message lands whole in its own device buffer, bytes past
//              it untouched ("messages ok")
//   exchange   2 ranks: each sends to the other, then waits (the 1F1B steady state and the step
//              end's exchange of tied parameters): no deadlock, the data right ("exchange ok")
//   order      2 ranks: rank 0 sends 'a' then 'b'; rank 1 posts only 'b' and waits for it: the
//              clear error (NCCL would put 'a' into 'b''s buffer)
//   collect    2 ranks: all-gather of per-rank doubles, a broadcast and a transfer between device
//              buffers ("collect ok")
//   watchdog   2 ranks: rank 1 waits for a message rank 0 never sends (--timeout argv[2])
#include "comm_nccl.h"
#include "pipert.h"
#include "pipert_cuda.h"

#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int R, S; // this rank, job size

static void start(PrComm *c, double timeout) {
  int argc = 1;
  char *args[] = {"test_comm_nccl", NULL}, **argv = args;
  pr_transport_nccl.start(c, &argc, &argv, timeout);
  pr_cu_init(pr_cu_comm_device(), 1, 4096);
}

static float value(int tag, int step, int m, int i) {
  return (float)(tag * 100000 + step * 1000 + m * 100) + (float)i * 0.5f;
}

enum { M = 4, FLOATS = 1000, NS = 4 };

static int run_messages(void) {
  // Streams 0..2: rank 0 -> 1, tags 10k, FLOATS - 100k floats; stream 3: rank 1 -> 0, tag 90.
  static PrChannel ch[NS];
  for (int k = 0; k < NS; k++) {
    bool forward = k < 3;
    static char names[NS][16];
    snprintf(names[k], sizeof names[k], forward ? "h%d" : "dh%d", k);
    ch[k] = (PrChannel){names[k], 1 - R, forward ? 10 * k : 90,
                        (int64_t)(FLOATS - 100 * (forward ? k : 0)) * 4, (R == 0) == forward};
  }
  PrComm c = {R, S, S - 1, 0, ch, NS, M, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
  start(&c, 60);
  float *buf[NS][M], host[FLOATS];
  for (int k = 0; k < NS; k++)
    for (int m = 0; m < M; m++) buf[k][m] = pr_cu_alloc_region("buf", FLOATS * 4);
  for (int step = 0; step < 3; step++) {
    for (int k = 0; k < NS; k++)
      if (!ch[k].send)
        for (int m = 0; m < M; m++) {
          memset(host, 0xff, sizeof host);
          pr_cu_upload(buf[k][m], host, sizeof host);
          pr_cu_comm_post_recv(k, m, buf[k][m]);
        }
    for (int m = M - 1; m >= 0; m--)
      for (int k = 0; k < NS; k++) {
        if (!ch[k].send) continue;
        pr_cu_comm_wait_send(k, m);
        for (int i = 0; i < FLOATS; i++) host[i] = value(ch[k].tag, step, m, i);
        pr_cu_upload(buf[k][m], host, sizeof host); // on the compute stream, before the send
        pr_cu_comm_send(k, m, buf[k][m]);
      }
    for (int k = 0; k < NS; k++)
      if (!ch[k].send)
        for (int m = 0; m < M; m++) {
          pr_cu_comm_wait_recv(k, m, R == 1 ? "F(v1)" : "B(v0)"); // lives on
          pr_cu_download(host, buf[k][m], sizeof host);           // compute waits for the receive
          int64_t n = ch[k].bytes / 4;
          for (int64_t i = 0; i < FLOATS; i++) {
            uint32_t got;
            memcpy(&got, &host[i], 4);
            float want = i < n ? value(ch[k].tag, step, m, (int)i) : 0;
            prCheck(i < n ? host[i] == want : got == 0xffffffffu, "the NCCL transport is broken",
                    "step %d: stream '%s' microbatch %d element %lld is %g, expected %g%s", step,
                    ch[k].tensor, m, (long long)i, (double)host[i], (double)want,
                    i < n ? "" : " (past the message: untouched)");
          }
        }
    pr_cu_comm_wait_sends();
  }
  printf("messages ok\n");
  pr_transport_nccl.finish();
  return 0;
}

static int run_exchange(void) {
  // Stream 0: this rank's send (tag = its rank), stream 1: the peer's (tag = the peer's rank).
  static PrChannel ch[2];
  ch[0] = (PrChannel){"mine", 1 - R, R, 4 * FLOATS, true};
  ch[1] = (PrChannel){"theirs", 1 - R, 1 - R, 4 * FLOATS, false};
  PrComm c = {R, S, S - 1, 0, ch, 2, M, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
  start(&c, 60);
  float *out[M], *in[M], host[FLOATS];
  for (int m = 0; m < M; m++) {
    out[m] = pr_cu_alloc_region("out", 4 * FLOATS);
    in[m] = pr_cu_alloc_region("in", 4 * FLOATS);
  }
  for (int step = 0; step < 3; step++) {
    for (int m = 0; m < M; m++) { // send m, then wait for the peer's m (both ranks alike)
      pr_cu_comm_post_recv(1, m, in[m]);
      pr_cu_comm_wait_send(0, m);
      for (int i = 0; i < FLOATS; i++) host[i] = value(R, step, m, i);
      pr_cu_upload(out[m], host, sizeof host);
      pr_cu_comm_send(0, m, out[m]);
      pr_cu_comm_wait_recv(1, m, "B(v0)");
      pr_cu_download(host, in[m], sizeof host);
      for (int i = 0; i < FLOATS; i++)
        prCheck(host[i] == value(1 - R, step, m, i), "the NCCL transport is broken",
                "step %d microbatch %d element %d is %g, expected %g", step, m, i, (double)host[i],
                (double)value(1 - R, step, m, i));
    }
    pr_cu_comm_wait_sends();
  }
  printf("exchange ok\n");
  pr_transport_nccl.finish();
  return 0;
}

static int run_order(void) {
  static PrChannel ch[2];
  ch[0] = (PrChannel){"a", 1 - R, 1, 64, R == 0};
  ch[1] = (PrChannel){"b", 1 - R, 2, 64, R == 0};
  PrComm c = {R, S, S - 1, 0, ch, 2, 1, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
  start(&c, 30);
  float *d = pr_cu_alloc_region("d", 64);
  if (R == 0) {
    pr_cu_comm_send(0, 0, d);
    pr_cu_comm_send(1, 0, d);
    pr_cu_comm_wait_sends(); // never completes: the abort ends it
  } else {
    pr_cu_comm_post_recv(1, 0, d);
    pr_cu_comm_wait_recv(1, 0, "F(v1, m0)");
  }
  pr_transport_nccl.finish();
  return 0;
}

static int run_collect(void) {
  static PrChannel none[1];
  PrComm c = {R, S, S - 1, 0, none, 0, 1, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
  start(&c, 60);
  enum { N = 5 };
  double mine[N], all[2 * N];
  for (int i = 0; i < N; i++) mine[i] = 0.1 * i + R + 0x1p-40 * R;
  double *dm = pr_cu_alloc_region("mine", sizeof mine), *da = pr_cu_alloc_region("all", sizeof all);
  pr_cu_upload(dm, mine, sizeof mine);
  pr_cu_comm_allgather(dm, da, N);
  pr_cu_download(all, da, sizeof all);
  for (int r = 0; r < 2; r++)
    for (int i = 0; i < N; i++) {
      double want = 0.1 * i + r + 0x1p-40 * r;
      prCheck(memcmp(&all[r * N + i], &want, 8) == 0, "the NCCL all-gather is broken",
              "all-gather: rank %d's element %d is %.17g, expected %.17g", r, i, all[r * N + i],
              want);
    }
  float f[64];
  for (int i = 0; i < 64; i++) f[i] = R == 1 ? (float)i : -1.0f;
  float *df = pr_cu_alloc_region("f", sizeof f);
  pr_cu_upload(df, f, sizeof f);
  pr_cu_comm_broadcast(df, sizeof f, 1);
  pr_cu_download(f, df, sizeof f);
  for (int i = 0; i < 64; i++)
    prCheck(f[i] == (float)i, "the NCCL broadcast is broken", "broadcast: element %d is %g", i,
            (double)f[i]);
  for (int i = 0; i < 64; i++) f[i] = R == 0 ? 2.0f * (float)i : 0.0f;
  pr_cu_upload(df, f, sizeof f);
  pr_cu_comm_transfer(df, sizeof f, 0, 1);
  pr_cu_download(f, df, sizeof f);
  for (int i = 0; i < 64; i++)
    prCheck(f[i] == 2.0f * (float)i, "the NCCL transfer is broken", "transfer: element %d is %g", i,
            (double)f[i]);
  printf("collect ok\n");
  pr_transport_nccl.finish();
  return 0;
}

static int run_watchdog(double timeout) {
  static PrChannel ch[1];
  ch[0] = (PrChannel){"blocks.1.h", 1 - R, 3, 64, R == 0};
  PrComm c = {R, S, S - 1, 0, ch, 1, 4, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
  start(&c, timeout);
  float *d = pr_cu_alloc_region("d", 64);
  if (R == 1) {
    pr_cu_comm_post_recv(0, 3, d);
    pr_cu_comm_wait_recv(0, 3, "F(v1, m3)");
  } else {
    sleep(60); // never sends (the abort ends it)
  }
  pr_transport_nccl.finish();
  return 0;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  if (strcmp(mode, "gpus") == 0) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    printf("%d\n", n);
    return 0;
  }
  const char *s = getenv("TEST_NCCL_RANKS"), *r = getenv("OMPI_COMM_WORLD_RANK");
  S = s && *s ? atoi(s) : 1;
  R = r && *r ? atoi(r) : 0;
  pr_rank = R;
  if (S > 1) pr_prefix_start(R);
  if (strcmp(mode, "unstarted") == 0) {
    pr_cu_comm_send(0, 0, NULL);
    return 0;
  }
  if (strcmp(mode, "start") == 0) {
    static PrChannel none[1];
    PrComm c = {R, S, S - 1, 0, none, 0, 1, &pr_transport_nccl, 1, NULL, NULL, 0, NULL, -1};
    start(&c, 30);
    printf("start ok on device %d\n", pr_cu_comm_device());
    pr_transport_nccl.finish();
    return 0;
  }
  prCheck(S == 2, "run it with TEST_NCCL_RANKS=2 under mpirun -np 2", "mode '%s' needs 2 ranks",
          mode);
  if (strcmp(mode, "messages") == 0) return run_messages();
  if (strcmp(mode, "exchange") == 0) return run_exchange();
  if (strcmp(mode, "order") == 0) return run_order();
  if (strcmp(mode, "collect") == 0) return run_collect();
  if (strcmp(mode, "watchdog") == 0) return run_watchdog(argc > 2 ? atof(argv[2]) : 300);
  fprintf(stderr, "test_comm_nccl: unknown mode '%s'\n", mode);
  return 2;
}
