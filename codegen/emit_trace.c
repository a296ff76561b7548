// emit_trace.c: the decoration of the printed program, the one place that says what wraps an
// action's call in train_step and what follows a kernel call inside an action's function; the
// printers (emit_rank.c's train_step, segment.c's calls) print through it and know none of it.
//
// --trace (runtime/trace.h): every action that runs on the rank's compute thread (LOAD, F, LOSS,
// B, W, TIED_SUM) is printed as
//     pr_trace_begin(PR_TR_F, 1, 3); F_1(1); pr_trace_end(); // m3
// kind, stage and microbatch as constants (m = -1 for TIED_SUM). Both hooks test one flag of the
// runtime, false unless the step is traced. SEND and RECV are the transport's to report
// (comm_mpi.c); NORM and OPT the training loop's (trainloop.c). The CUDA target prints no hooks:
// its times would be kernel launches, and its runtime refuses --trace.
//
// --profile (`pipec profile`, E.profile): an F, B or W line goes between the wall and CPU clocks'
// readings and pr_prof_act(kind, v, ...) (runtime/profile.c), in a block of its own.
//
// Progress: on a rank with message streams (E.streams, emit_rank_has_streams), each long-running
// kernel (OpDef.progress: GEMMs, attention) of an F, B or W function is followed by
// pr_comm_progress(), so that a message waiting for this rank to enter MPI (a rendezvous over
// shared memory) completes while it computes (runtime/comm_mpi.c); not in a step end, whose
// messages are waited for around it. A rank without streams (S = 1) prints none: it has no MPI.
#include "emit.h"
#include "../ir/ops.h"

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

// call between the --trace hooks of action x; call itself for an action the runtime reports.
static const char *traced(E *e, const Action *x, const char *call) {
  const char *k = kind_name(x->kind);
  if (!k || e->cuda) return call; // the CUDA program has none (its runtime refuses --trace)
  return arena_printf(e->a, "pr_trace_begin(%s, %d, %d); %s pr_trace_end();", k, x->v,
                      x->kind == ACT_TIED_SUM ? -1 : x->m, call);
}

static bool compute(ActionKind k) {
  return k == ACT_F || k == ACT_B || k == ACT_W;
}

void emit_act(E *e, const Action *x, const char *call, const char *note) {
  bool timed = e->profile && compute(x->kind);
  if (timed) out(e, "  { double t_ = pr_now(), c_ = pr_cpu_now();\n");
  out_stmt(e, "  ", traced(e, x, call), note);
  if (timed)
    out(e, "  pr_prof_act(%d, %d, t_, c_); }\n",
        x->kind == ACT_F   ? 0
        : x->kind == ACT_B ? 1
                           : 2,
        x->v);
}

void emit_after_kernel(E *e, const Node *n, const char *indent) {
  if (compute(e->fn) && n->op->progress && e->streams) out(e, "%spr_comm_progress();\n", indent);
}
