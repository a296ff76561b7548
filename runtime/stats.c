// stats.c: PipeDream's RuntimeStats for a pipeline job: per rank, where the step's wall time went
// (compute, waiting on receives, waiting for sends to complete, the step end's synchronisation)
// and how many bytes it sent and received. The transports add to pr_stats as they wait and send
// (comm_mpi.c; the NCCL transport counts bytes only: its waits are on the device); the step end's
// all-gather (pipeline.c) carries every rank's snapshot to every rank at no extra message, and the
// training loop prints the report rank's table of the differences between two snapshots: every
// log interval with --stats, and over the whole run at the end. Compute is the rest of the wall
// time: everything that is not one of the waits (kernels, the optimizer, data loading, copies).
#include "pipert.h"

#include <stdio.h>
#include <string.h>

PrStats pr_stats;

void pr_stats_reset(void) {
  memset(&pr_stats, 0, sizeof pr_stats);
  pr_stats.t0 = pr_now();
}

void pr_stats_snapshot(double *out) {
  out[PR_STAT_ELAPSED] = pr_now() - pr_stats.t0;
  out[PR_STAT_RECV_WAIT] = pr_stats.recv_wait;
  out[PR_STAT_SEND_WAIT] = pr_stats.send_wait;
  out[PR_STAT_SYNC] = pr_stats.sync;
  out[PR_STAT_SENT] = (double)pr_stats.sent;
  out[PR_STAT_RECEIVED] = (double)pr_stats.received;
  out[PR_STAT_EXCHANGE] = pr_stats.exchange;
}

// "1.50 MiB", "312.0 KiB", "96 B".
static void fmt_bytes(char *out, size_t cap, double b) {
  if (b >= 1 << 20)
    snprintf(out, cap, "%.2f MiB", b / (1 << 20));
  else if (b >= 1 << 10)
    snprintf(out, cap, "%.1f KiB", b / (1 << 10));
  else
    snprintf(out, cap, "%.0f B", b);
}

void pr_stats_print(FILE *out, const char *what, int64_t steps, int nranks, const double *now,
                    int now_stride, const double *before, int before_stride) {
  if (steps <= 0) return;
  fprintf(out, "statistics %s, per step: %lld step%s\n", what, (long long)steps,
          steps == 1 ? "" : "s");
  fprintf(out, "  rank   wall ms  compute ms  recv wait ms  send wait ms  step-end sync ms"
               "       sent   received\n");
  for (int r = 0; r < nranks; r++) {
    const double *a = now + (size_t)r * (size_t)now_stride;
    const double *b = before ? before + (size_t)r * (size_t)before_stride : NULL;
    double d[PR_STAT_N];
    for (int k = 0; k < PR_STAT_N; k++) d[k] = (a[k] - (b ? b[k] : 0)) / (double)steps;
    double compute =
        d[PR_STAT_ELAPSED] - d[PR_STAT_RECV_WAIT] - d[PR_STAT_SEND_WAIT] - d[PR_STAT_SYNC];
    char sent[32], recv[32];
    fmt_bytes(sent, sizeof sent, d[PR_STAT_SENT]);
    fmt_bytes(recv, sizeof recv, d[PR_STAT_RECEIVED]);
    fprintf(out, "  %4d %9.2f %11.2f %13.2f %13.2f %17.2f %10s %10s\n", r, d[PR_STAT_ELAPSED] * 1e3,
            compute * 1e3, d[PR_STAT_RECV_WAIT] * 1e3, d[PR_STAT_SEND_WAIT] * 1e3,
            d[PR_STAT_SYNC] * 1e3, sent, recv);
  }
}
