// emit_trace.c: the --trace hooks around an action of train_step (runtime/trace.h). Every action
// that runs on the rank's compute thread (LOAD, F, LOSS, B, W, TIED_SUM) is printed as
//     pr_trace_begin(PR_TR_F, 1, 3); F_1(1); pr_trace_end();
// kind, stage and microbatch as constants (m = -1 for TIED_SUM). Both hooks test one flag of the
// runtime, false unless the step is traced. SEND and RECV are the transport's to report
// (comm_mpi.c); NORM and OPT the training loop's (trainloop.c). The CUDA target prints no hooks:
// its times would be kernel launches, and its runtime refuses --trace.
#include "emit.h"

static const char *kind_name(ActionKind k) {
  switch (k) {
  case ACT_LOAD:
    return "PR_TR_LOAD";
  case ACT_F:
    return "PR_TR_F";
  case ACT_LOSS:
    return "PR_TR_LOSS";
  case ACT_B:
    return "PR_TR_B";
  case ACT_W:
    return "PR_TR_W";
  case ACT_TIED_SUM:
    return "PR_TR_TIED_SUM";
  default:
    return NULL;
  }
}

const char *emit_traced(E *e, const Action *x, const char *call) {
  const char *k = kind_name(x->kind);
  if (!k || e->cuda) return call; // the CUDA program has none (its runtime refuses --trace)
  return arena_printf(e->a, "pr_trace_begin(%s, %d, %d); %s pr_trace_end();", k, x->v,
                      x->kind == ACT_TIED_SUM ? -1 : x->m, call);
}
