// emit_rank.c: the parts of a rank's program that follow the pipeline (docs/pipeline.md): its
// message streams (the PrComm table), its per-stage data loaders, its train_step printed from the
// action list with the channel traffic, and its evaluation forward across the stages. S = 1 is
// the one-rank case of the same printer: no channel, no stream, no PrComm (E.comm: without
// --replicas the program has no MPI at all), its one stage's loader load_0 and its actions.
//
// Message streams. Each channel of the Program (compiler/comm.c) is one stream on its sender's
// rank and one on its receiver's, tagged with the channel's tag on both sides. A channel between
// two stages of one rank (a skip under --virtual) is no stream: its COPY copies the tensor
// (memcpy), which the verifier's rule makes safe there: the sender's buffer still holds
// microbatch m (the action that rewrites it for m + K runs after COPY(c, m)) and the receiving
// slot is free (everything of m - K on the receiving stage ran before). Each exchange group (a
// parameter held on several ranks) adds one stream per exchange message (Program.exm, made by
// compiler/lower_step_end.c with its tag): the buffer's rank sends it at step end, the holder
// receives it into its own copy.
//
// With --replicas D (Program.replicas) the same programs run in every replica, also at S = 1:
// PrComm.replicas tells the transport, the loaders offset their microbatch by pr_replica * NMICRO
// (NMICRO = M / D) and train_step returns its loss sum (the runtime adds the replicas',
// replicas.c). The replicas' gradient exchange goes in buckets (buckets.c: per action, layer and
// REP_BUCKET_BYTES, in the order the gradients become final): the B_v / W_v functions call
// pr_replicas_ready(k) right after the kernel that makes bucket k final, when rep_final is set,
// which train_step does around the one action of the step that makes them final (a stage's last
// B or W); a TIED_SUM's buckets are sent right after it. The runtime sends a bucket while the
// rank and the pipeline run the rest of their backward.
//
// PipeDream's uneven form (Program.stage_reps, compiler/uneven.c): the program keeps the
// unreplicated list (NMICRO = the step's M) and train_step runs each microbatch m's actions on
// replica m mod D_s only (`if (pr_replica == r)`, its receive posts likewise; the accumulation
// flag and the buckets' final action per replica); the transport sends message m to the peer's
// replica m mod D_peer.
//
// Every compute action is printed by the decoration (emit_act; the transport reports the
// messages). Channel traffic in train_step (pipeline.h's actions, one line each, printed where
// the list has them; compiler/lower_comm.c places the marks and the copies): COPY(c, m) (a
// channel between two stages of this rank) is a memcpy (CUDA: pr_cu_copy); SEND(c, m) is
// pr_comm_send; POST_RECV(c, m) pr_comm_post_recv; RECV(c, m) pr_comm_wait_recv (with the post
// before it when no POST_RECV came first: a blocking receive); WAIT_SEND(c, m) pr_comm_wait_send.
// The step end's messages are actions too (compiler/lower_step_end.c): WAIT_SENDS is
// pr_comm_wait_sends, EX_POST / EX_SEND / EX_WAIT the exchange's post, send and wait (m = 0).
//
// The CUDA target (--comm mpi) stages every message on the host: each stream has a static host
// buffer per microbatch, hb<s>[m]; a send downloads the device tensor into it and sends it, a
// receive lands in it and is uploaded into the device tensor after its wait; a channel between two
// stages of one rank is a device copy (pr_cu_copy).
#include <string.h>

#include "../compiler/schedule.h"
#include "../compiler/uneven.h"
#include "emit.h"

typedef struct Stream {
  const char *name;  // the tensor's name (the buffer's on this rank)
  int peer;          // the other rank
  int tag;           // stream tag, the same on both sides
  int64_t bytes;     // bytes per message
  bool send;         // this rank sends on it
  const Tensor *buf; // this rank's buffer (send: the source; receive: the destination)
} Stream;

struct Streams {
  Stream *s;    // this rank's streams: channels in id order (send before receive), exchanges
  int n;        // count
  int *send_of; // per channel id: its send stream on this rank (-1: none)
  int *recv_of; // per channel id: its receive stream on this rank (-1: none)
  int ex_first; // index of the first exchange stream
  int *ex_of;   // per exchange message id (Program.exm): its stream on this rank (-1: none)
};

static int64_t bytes_of(const E *e, const Tensor *t) {
  return shape_numel(&t->shape, e->tc->mb_size) * tensor_elem_size(t);
}

static int rank_of(const E *e, int v) {
  return e->prog->vs[v].rank;
}

static Streams *streams(E *e) {
  if (e->st) return e->st;
  const Program *P = e->prog;
  int me = e->rp->rank, cap = 2 * P->nch + P->nexm + 1;
  Streams *st = arena_alloc(e->a, sizeof *st);
  *st = (Streams){ARENA_ARRAY(e->a, Stream, cap),     0, ARENA_ARRAY(e->a, int, P->nch + 1),
                  ARENA_ARRAY(e->a, int, P->nch + 1), 0, ARENA_ARRAY(e->a, int, P->nexm + 1)};
  for (int c = 0; c < P->nch; c++) {
    const Channel *ch = &P->ch[c];
    int from = rank_of(e, ch->from_v), to = rank_of(e, ch->to_v);
    st->send_of[c] = st->recv_of[c] = -1;
    if (from == to) continue; // on one rank: copied at its RECV
    if (from == me) {
      st->send_of[c] = st->n;
      st->s[st->n++] = (Stream){ch->t->name, to, ch->tag, ch->bytes, true, ch->t};
    }
    if (to == me) {
      st->recv_of[c] = st->n;
      st->s[st->n++] = (Stream){ch->dst->name, from, ch->tag, ch->bytes, false, ch->dst};
    }
  }
  st->ex_first = st->n;
  for (int k = 0; k < P->nexm; k++) { // the step end's exchange messages (lower_step_end.c)
    const ExMsg *q = &P->exm[k];
    st->ex_of[k] = -1;
    if (q->from != me && q->to != me) continue;
    st->ex_of[k] = st->n;
    st->s[st->n++] = (Stream){q->buf->name,  q->from == me ? q->to : q->from,
                              q->tag,        bytes_of(e, q->buf),
                              q->from == me, q->buf};
  }
  return e->st = st;
}

bool emit_rank_has_streams(E *e) {
  return streams(e)->n > 0;
}

void emit_rank_comm(E *e) {
  Streams *st = streams(e);
  const Program *P = e->prog;
  int report = 0, accuracy = -1;
  for (int v = 0; v < P->nv; v++)
    if (P->vs[v].has_loss) report = P->vs[v].rank;
  if (e->tc->accuracy) accuracy = P->vs[P->vstage_of_node[e->tc->accuracy->id]].rank;
  out(e,
      "// ---- Message streams of this rank (runtime/comm.h): tensor, peer rank, tag, bytes per\n"
      "// message, sent by this rank\n");
  out(e, "static const PrChannel CH[%d] = {\n", st->n > 0 ? st->n : 1);
  for (int i = 0; i < st->n; i++) {
    const Stream *s = &st->s[i];
    out(e, "    {%s, %d, %d, %lld, %s}, // %d: %s\n", cstring(e, s->name), s->peer, s->tag,
        (long long)s->bytes, s->send ? "true" : "false", i,
        i < st->ex_first ? "channel" : "exchange (step end)");
  }
  out(e, "};\n");
  if (e->cuda) { // the host staging of each stream's messages, one per microbatch
    out(e, "// Host staging of the messages (CUDA target, host-staged MPI): stream, microbatch.\n");
    for (int i = 0; i < st->n; i++)
      out(e, "static char hb%d[NMICRO][%lld];\n", i,
          (long long)(st->s[i].bytes > 0 ? st->s[i].bytes : 1));
  }
  const char *rep = "";
  if (e->rep) { // the buckets of the replicas' gradient exchange (runtime/replicas.c)
    const RepBuckets b = *e->rep;
    out(e,
        "// The replicas' gradient exchange: %d bucket(s) of parameters, in the order their\n"
        "// gradients become final (bucket: after action).\n",
        b.nb);
    out(e, "static const int REP_PARAM[%d] = {", b.n > 0 ? b.n : 1);
    int col = snprintf(NULL, 0, "static const int REP_PARAM[%d] = {", b.n > 0 ? b.n : 1);
    for (int i = 0; i < b.n; i++) { // wrapped within 100 columns
      int w = snprintf(NULL, 0, "%d", b.param[i]) + (i ? 2 : 0);
      if (col + w + 2 > 100)
        out(e, ",\n    "), col = 4, w -= i ? 2 : 0;
      else if (i)
        out(e, ", ");
      out(e, "%d", b.param[i]);
      col += w;
    }
    out(e, "%s};\nstatic const int REP_END[%d] = {", b.n ? "" : "0", b.nb > 0 ? b.nb : 1);
    for (int k = 0; k < b.nb; k++) out(e, "%s%d", k ? ", " : "", b.end[k]);
    out(e, "%s}; //", b.nb ? "" : "0");
    for (int k = 0; k < b.nb; k++) out(e, " %d: %d", k, b.after[k]);
    out(e, "\n");
    rep = arena_printf(e->a,
                       ",\n                            .rep_param = REP_PARAM, .rep_end = "
                       "REP_END, .rep_nbuckets = %d",
                       b.nb);
  }
  if (P->stage_reps) { // uneven: each stage's replica count (compiler/uneven.c)
    out(e,
        "// PipeDream's uneven replication: each pipeline rank's replica count.\n"
        "static const int STAGE_REPS[%d] = {",
        P->nranks);
    for (int s = 0; s < P->nranks; s++) out(e, "%s%d", s ? ", " : "", P->stage_reps[s]);
    out(e, "};\n");
    rep = arena_printf(e->a, "%s,\n                            .stage_reps = STAGE_REPS", rep);
  }
  out(e,
      "static const PrComm comm = {.rank = %d, .nranks = %d, .report_rank = %d, .save_rank = 0,\n"
      "                            .ch = CH, .nch = %d, .nmicro = NMICRO,\n"
      "                            .transport = &pr_transport_mpi, .replicas = %d%s,\n"
      "                            .accuracy_rank = %d};\n\n",
      e->rp->rank, P->nranks, report, st->n, P->replicas > 1 ? P->replicas : 1, rep, accuracy);
}

// Whether stage v of this rank holds tensor t (has storage for it, in v's slots when slotted).
static bool holds(const E *e, const Tensor *t, int v) {
  if (!t || e->p->offset[t->id] < 0) return false;
  return !e->p->vstage || e->p->vstage[t->id] < 0 || e->p->vstage[t->id] == v;
}

void emit_rank_loaders(E *e) {
  const TrainConfig *tc = e->tc;
  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  bool table = tc->data == DATA_CSV || tc->data == DATA_NPY;
  for (int i = 0; i < e->rp->nvs; i++) {
    const VStage *s = &e->prog->vs[e->rp->vs[i]];
    if (!s->loads) continue;
    out(e,
        "// Stage %d's data inputs of one training microbatch into its slot (those it holds).\n"
        "static void load_%d(int split, uint64_t seed, int64_t step, int m, int slot) {\n"
        "  (void)split, (void)slot;\n",
        s->v, s->v);
    // --replicas D: replica pr_replica's microbatch m is the step's global microbatch
    // pr_replica * NMICRO + m (NMICRO = M / D), loaded as the one-replica program loads it.
    if (e->prog->replicas > 1) out(e, "  m += pr_replica * NMICRO;\n");
    // Any stage may load any fed input (a batch row is one table row): the ones its nodes read.
    bool h[MAX_FEEDS];
    for (int k = 0; k < tc->nfeeds; k++) h[k] = holds(e, tc->feeds[k].t, s->v);
    if (tokens)
      out(e, "  pr_tokens_batch(&data, split, seed, step, m, MB, SEQ, %s, %s);%s\n",
          cu_in(e, tc->feeds[0].t, h[0]), cu_in(e, tc->feeds[1].t, h[1]),
          cu_upload_inputs(e, h, "  "));
    else if (table)
      out(e, "  %s\n  pr_table_batch(&data, seed, step, m, MB, in_);%s\n", feed_dsts(e, h),
          cu_upload_inputs(e, h, "  "));
    else
      out(e, "  (void)seed, (void)step, (void)m;\n");
    out(e, "}\n");
  }
  out(e, "\n");
}

// "{ const int slot = k; TEXT }" when stage v's buffers are slotted, else TEXT. The tensors'
// macros read `slot`; on the CUDA target a message's text may name only its host staging buffer
// (a receive's post), and nvcc, whose warnings the CUDA build treats as errors, warns of an unused
// const where gcc does not: there the block also says (void)slot.
static const char *in_slot(E *e, int v, int m, const char *text) {
  if (v < 0 || e->p->slots[v] <= 1) return text;
  return arena_printf(e->a, "{ const int slot = %d;%s %s }", stage_slot(e->prog, v, m),
                      e->cuda ? " (void)slot;" : "", text);
}

// The address of tensor t in slot k of its stage, as a constant offset (no `slot` variable).
static const char *addr_at(E *e, const Tensor *t, int k) {
  const Plan *p = e->p;
  int v = p->vstage ? p->vstage[t->id] : -1;
  int64_t off = p->offset[t->id] + (v >= 0 && p->slots[v] > 1 ? k * p->slot_stride[v] : 0);
  return arena_printf(e->a, "(%s + %lld)", region_ptr[p->region[t->id]], (long long)off);
}

// The copy that is a channel between two stages of this rank: microbatch m (slots m mod K).
static const char *local_copy(E *e, const Channel *c, int m) {
  const Program *P = e->prog;
  return arena_printf(e->a, "%s(%s, %s, %lld);", e->cuda ? "pr_cu_copy" : "memcpy",
                      addr_at(e, c->dst, m % P->vs[c->to_v].K),
                      addr_at(e, c->t, m % P->vs[c->from_v].K), (long long)c->bytes);
}

// Where stream s's message for microbatch m is received into / sent from: the tensor itself, or
// on the CUDA target its host staging.
static const char *msg_buf(E *e, int s, int m, const Tensor *t) {
  return e->cuda ? arena_printf(e->a, "hb%d[%d]", s, m) : tid(e, t);
}

// The send of tensor t on stream s for microbatch m (CUDA: downloaded into its staging first).
static const char *send_text(E *e, int s, int m, const Tensor *t) {
  const char *dl = e->cuda ? arena_printf(e->a, "pr_cu_download(hb%d[%d], %s, sizeof hb%d[%d]); ",
                                          s, m, tid(e, t), s, m)
                           : "";
  return arena_printf(e->a, "%spr_comm_send(%d, %d, %s);", dl, s, m, msg_buf(e, s, m, t));
}

// After the wait of stream s's receive for microbatch m into tensor t: CUDA uploads the staging
// into the tensor (NULL on the CPU: nothing to do).
static const char *recv_upload(E *e, int s, int m, const Tensor *t) {
  if (!e->cuda) return NULL;
  return arena_printf(e->a, "pr_cu_upload(%s, hb%d[%d], sizeof hb%d[%d]);", tid(e, t), s, m, s, m);
}

static bool is_local(const E *e, const Channel *c) {
  return rank_of(e, c->from_v) == rank_of(e, c->to_v);
}

static const char *act_label(E *e, const Action *x) {
  if (x->ch) return arena_printf(e->a, "%s(c%d, m%d)", action_name(x->kind), x->ch->id, x->m);
  if (x->m < 0) return arena_printf(e->a, "%s(v%d)", action_name(x->kind), x->v);
  return arena_printf(e->a, "%s(v%d, m%d)", action_name(x->kind), x->v, x->m);
}

static bool internal(E *e, Diag *d, const char *what) {
  diag_error(d, (Loc){0, 0}, "internal error: codegen: rank %d: %s", e->rp->rank, what);
  return false;
}

// Uneven replication (compiler/uneven.c): the replica of this rank that runs microbatch m's
// actions, or -1 where every replica runs them (a step-end action, or a rank with one replica).
static int runner(const E *e, int m) {
  int D = uneven_reps(e->prog, e->rp->rank);
  return m < 0 || D <= 1 ? -1 : m % D;
}

// text, run only by the replica that runs microbatch m (uneven replication; else as it is).
static const char *for_runner(E *e, int m, const char *text) {
  int r = runner(e, m);
  return r < 0 || !text ? text : arena_printf(e->a, "if (pr_replica == %d) %s", r, text);
}

// Uneven replication: emit_acc per replica (the first B or W of a stage that this replica runs
// writes its gradients; done has 2 x nv x D flags).
static int acc_uneven(const E *e, bool *done, const Action *x) {
  if (x->v < 0 || (x->kind != ACT_B && x->kind != ACT_W)) return 0;
  int D = uneven_reps(e->prog, e->rp->rank);
  bool *d = &done[(2 * x->v + (x->kind == ACT_W)) * D + x->m % D];
  int acc = *d;
  *d = true;
  return acc;
}

// Uneven replication: whether action i makes buckets final from inside its B_v / W_v for the
// replica that runs it: its kind and stage are those of a bucket's action (rep_final_action's,
// the list's last), and it is the last of them that its replica runs.
static bool final_uneven(const E *e, const RepBuckets *rb, int i) {
  const RankProgram *rp = e->rp;
  const Action *x = &rp->acts[i];
  int D = uneven_reps(e->prog, rp->rank);
  bool kind = false;
  for (int k = 0; rb && k < rb->nb; k++)
    if (rb->node[k] >= 0)
      kind |= rp->acts[rb->after[k]].kind == x->kind && rp->acts[rb->after[k]].v == x->v;
  if (!kind || x->m < 0) return false;
  for (int j = i + 1; j < rp->nacts; j++) {
    const Action *y = &rp->acts[j];
    if (y->kind == x->kind && y->v == x->v && y->m % D == x->m % D) return false;
  }
  return true;
}

// The line of a message mark (NULL: the channel has no stream or buffer here): POST_RECV(c, m) is
// pr_comm_post_recv into the receiving stage's slot (uneven: on microbatch m's replica only),
// WAIT_SEND(c, m) pr_comm_wait_send.
static const char *mark_text(E *e, const Action *x) {
  Streams *st = streams(e);
  const Channel *c = x->ch;
  if (is_local(e, c)) return NULL;
  if (x->kind == ACT_WAIT_SEND) {
    int s = st->send_of[c->id];
    if (s < 0 || e->p->offset[c->t->id] < 0) return NULL;
    return arena_printf(e->a, "pr_comm_wait_send(%d, %d);", s, x->m);
  }
  int s = st->recv_of[c->id];
  if (s < 0 || e->p->offset[c->dst->id] < 0) return NULL;
  const char *text =
      arena_printf(e->a, "pr_comm_post_recv(%d, %d, %s);", s, x->m, msg_buf(e, s, x->m, c->dst));
  return for_runner(e, x->m, in_slot(e, c->to_v, x->m, text)); // uneven: m's replica receives it
}

// The lines of step-end message action i (NULL: an exchange message without its stream here):
// WAIT_SENDS is pr_comm_wait_sends; EX_POST pr_comm_post_recv into the holder's copy of the
// buffer, EX_SEND its send, EX_WAIT pr_comm_wait_recv (named for the TIED_SUM after it; CUDA:
// with the upload after it). Exchange messages carry m = 0.
static const char *step_msg_text(E *e, int i) {
  const Action *x = &e->rp->acts[i];
  if (x->kind == ACT_WAIT_SENDS) return "  pr_comm_wait_sends();\n";
  int k = streams(e)->ex_of[x->m];
  if (k < 0) return NULL;
  const Tensor *b = e->prog->exm[x->m].buf;
  if (x->kind == ACT_EX_POST)
    return arena_printf(e->a, "  pr_comm_post_recv(%d, 0, %s);\n", k, msg_buf(e, k, 0, b));
  if (x->kind == ACT_EX_SEND) return arena_printf(e->a, "  %s\n", send_text(e, k, 0, b));
  const char *what = "TIED_SUM";
  for (int j = i + 1; j < e->rp->nacts; j++)
    if (e->rp->acts[j].kind == ACT_TIED_SUM) {
      what = act_label(e, &e->rp->acts[j]);
      break;
    }
  const char *up = recv_upload(e, k, 0, b);
  return arena_printf(e->a, "  pr_comm_wait_recv(%d, 0, %s);\n%s%s%s", k, cstring(e, what),
                      up ? "  " : "", up ? up : "", up ? "\n" : "");
}

// train_step(), printed from the rank's action list: one line per action (through the
// decoration, emit_act), no interpretation at run time. The rank-wide step end (NORM: the global
// gradient norm, its check and the clip; OPT: the optimizer) is the runtime's, after train_step
// returns (pr_main): the list must end with them. A stage's accumulating action (W when B and W
// are split, else B) overwrites the gradient buffers on its first microbatch of the step (acc 0)
// and adds into them after (acc 1).
bool emit_rank_train_step(E *e, Diag *d) {
  const RankProgram *rp = e->rp;
  const Program *P = e->prog;
  Streams *st = streams(e);
  int n = rp->nacts;
  if (n < 2 || rp->acts[n - 2].kind != ACT_NORM || rp->acts[n - 1].kind != ACT_OPT)
    return internal(e, d, "its actions do not end with NORM, OPT");
  // Per (c, m): its receive posted (a POST_RECV ran; a RECV without one posts it itself).
  bool *posted = ARENA_ARRAY(e->a, bool, (size_t)P->nch * P->M + 1);
  int nacc = 2 * P->nv * uneven_reps(P, rp->rank) + 1;
  bool *accumulated = ARENA_ARRAY(e->a, bool, nacc); // emit_acc's (acc_uneven's) flags
  out(e,
      "// One training step, from the action list: %d microbatch(es)%s,\n"
      "// then the stage step ends; returns the mean of the losses this rank computed (0 where\n"
      "// it has none). NORM and OPT follow in the runtime (pr_main).\n"
      "static double train_step(int64_t step, uint64_t seed) {\n  double loss = 0;\n",
      P->M, st->n > 0 ? " with the channel traffic" : ""); // S = 1: none
  out(e, "  (void)step, (void)seed;\n");
  const RepBuckets *rb = e->rep;
  for (int i = 0; i < n - 2; i++) {
    const Action *x = &rp->acts[i];
    if (x->kind == ACT_POST_RECV || x->kind == ACT_WAIT_SEND) { // the message marks
      const char *text = mark_text(e, x);
      if (!text)
        return internal(e, d, arena_printf(e->a, "%s without its buffer", act_label(e, x)));
      if (x->kind == ACT_POST_RECV) posted[(size_t)x->ch->id * P->M + x->m] = true;
      out(e, "  %s\n", text);
      continue;
    }
    if (action_step_msg(x->kind)) { // the step end's messages (lower_step_end.c)
      const char *text = step_msg_text(e, i);
      if (!text)
        return internal(e, d, arena_printf(e->a, "%s without its stream", act_label(e, x)));
      out(e, "%s", text);
      continue;
    }
    const VStage *s = x->v >= 0 ? &P->vs[x->v] : NULL;
    int slot = s && x->m >= 0 ? stage_slot(P, x->v, x->m) : 0;
    int acc = P->stage_reps ? acc_uneven(e, accumulated, x) : emit_acc(accumulated, x);
    int who = runner(e, x->m); // uneven: the replica that runs it (-1: every one)
    if (who >= 0) out(e, "  if (pr_replica == %d) { // m%d's replica\n", who, x->m);
    bool final = P->stage_reps ? final_uneven(e, rb, i) : rep_final_action(rb, i); // buckets.c
    if (final) out(e, "  rep_final = true; // the buckets final in this %s\n", act_label(e, x));
    const char *m_note = arena_printf(e->a, "m%d", x->m);
    switch (x->kind) {
    case ACT_LOAD:
      emit_act(e, x, arena_printf(e->a, "load_%d(PR_TRAIN, seed, step, %d, %d);", x->v, x->m, slot),
               m_note);
      break;
    case ACT_F:
      emit_act(e, x, arena_printf(e->a, "F_%d(%d);", x->v, slot), m_note);
      break;
    case ACT_LOSS:
      emit_act(e, x,
               in_slot(e, x->v, x->m, arena_printf(e->a, "loss += %s;", cu_scalar(e, e->g->loss))),
               m_note);
      break;
    case ACT_B:
      emit_act(e, x, arena_printf(e->a, "B_%d(%d, %d);", x->v, slot, acc), m_note);
      break;
    case ACT_W:
      emit_act(e, x, arena_printf(e->a, "W_%d(%d, %d);", x->v, slot, acc), m_note);
      break;
    case ACT_COPY: // a channel between two stages of this rank
      out_stmt(e, "  ", local_copy(e, x->ch, x->m),
               arena_printf(e->a, "COPY(%s, m%d) from stage %d of this rank",
                            comment(e, x->ch->dst->name), x->m, x->ch->from_v));
      break;
    case ACT_SEND:
      if (st->send_of[x->ch->id] < 0 || e->p->offset[x->ch->t->id] < 0)
        return internal(e, d,
                        arena_printf(e->a, "SEND of '%s' without its buffer", x->ch->t->name));
      out_stmt(
          e, "  ",
          in_slot(e, x->ch->from_v, x->m, send_text(e, st->send_of[x->ch->id], x->m, x->ch->t)),
          arena_printf(e->a, "SEND(%s, m%d)", comment(e, x->ch->t->name), x->m));
      break;
    case ACT_RECV: {
      if (st->recv_of[x->ch->id] < 0 || e->p->offset[x->ch->dst->id] < 0)
        return internal(e, d,
                        arena_printf(e->a, "RECV of '%s' without its buffer", x->ch->dst->name));
      if (!posted[(size_t)x->ch->id * P->M + x->m]) { // no POST_RECV: posted here, blocking
        Action post = {ACT_POST_RECV, -1, x->m, x->ch};
        const char *text = mark_text(e, &post);
        if (!text)
          return internal(e, d, arena_printf(e->a, "%s without its buffer", act_label(e, x)));
        out(e, "  %s\n", text);
      }
      const char *what = "RECV";
      for (int j = i + 1; j < n; j++) {
        const Action *y = &rp->acts[j];
        if (y->v == x->ch->to_v && y->m == x->m &&
            (y->kind == ACT_F || y->kind == ACT_B || y->kind == ACT_W)) {
          what = act_label(e, y);
          break;
        }
      }
      out_stmt(e, "  ",
               arena_printf(e->a, "pr_comm_wait_recv(%d, %d, %s);", st->recv_of[x->ch->id], x->m,
                            cstring(e, what)),
               arena_printf(e->a, "RECV(%s, m%d)", comment(e, x->ch->dst->name), x->m));
      const char *up = recv_upload(e, st->recv_of[x->ch->id], x->m, x->ch->dst);
      if (up) out(e, "  %s\n", in_slot(e, x->ch->to_v, x->m, up));
      break;
    }
    case ACT_TIED_SUM:
      emit_act(e, x, arena_printf(e->a, "step_end_%d();", x->v), NULL);
      break;
    default:
      return internal(e, d, arena_printf(e->a, "unexpected action %s", action_name(x->kind)));
    }
    if (final) out(e, "  rep_final = false;\n");
    if (who >= 0) out(e, "  }\n");
    for (int k = 0; rb && k < rb->nb; k++) // a TIED_SUM's buckets go to the replicas after it
      if (rb->after[k] == i && rb->node[k] < 0) out(e, "  pr_replicas_ready(%d);\n", k);
  }
  if (P->replicas > 1 || P->stage_reps) // the replicas add their sums (runtime/replicas.c)
    out(e, "  return loss; // the sum of this replica's losses\n}\n\n");
  else
    out(e, "  return loss / NMICRO;\n}\n\n");
  return true;
}

// Evaluation: every rank reads the batch's inputs it holds, then runs its stages in ascending
// order, each receiving its forward channels (m = 0, blocking), its forward segment and its
// forward sends (S = 1: the one stage's forward); the rank with the loss reports it (the others'
// results are unused), and the stage of TrainConfig.accuracy counts the correct predictions right
// after its forward (the runtime brings the counts to the reporting rank: PrComm.accuracy_rank).
// A random batch (not whole) weighs 1; the whole split's batches weigh their real rows, the
// last one's padding rows left out of the losses (loss_rows).
void emit_rank_eval(E *e) {
  const TrainConfig *tc = e->tc;
  const Program *P = e->prog;
  const Tensor *loss = e->g->loss;
  bool tokens = tc->data == DATA_TEXT || tc->data == DATA_U16;
  // The stage that counts the correct predictions: the accuracy node's (its logits, own or
  // received, and the class ids it reads are there), wherever the cuts fall.
  int va = tc->accuracy ? P->vstage_of_node[tc->accuracy->id] : -1;
  Streams *st = streams(e);
  int lv = -1; // the stage of this rank with the loss
  for (int i = 0; i < e->rp->nvs; i++)
    if (P->vs[e->rp->vs[i]].has_loss) lv = e->rp->vs[i];
  bool h[MAX_FEEDS]; // the fed inputs this rank holds
  for (int k = 0; k < tc->nfeeds; k++) h[k] = e->p->offset[tc->feeds[k].t->id] >= 0;
  const char *X = tokens ? cu_in(e, tc->feeds[0].t, h[0]) : NULL,
             *Y = tokens ? cu_in(e, tc->feeds[1].t, h[1]) : NULL;
  const char *up = cu_upload_inputs(e, h, "    ");
  out(e, "// ---- Validation: batches of one evaluation, and one batch's forward across the "
         "stages.\n");
  out(e, "static int64_t eval_batches(int64_t requested) {\n");
  if (tokens)
    out(e, "  return requested == 0 ? pr_tokens_val_batches(&data, MB, SEQ) : requested;\n}\n\n");
  else
    out(e, "  return pr_table_val_batches(&data, MB, requested);\n}\n\n");
  out(e, "static void eval_batch(int64_t k, bool whole, PrEvalBatch *r) {\n"
         "  const int slot = 0; // every stage's slot 0\n  (void)slot;\n");
  if (tokens)
    out(e,
        "  double weight = 1;\n"
        "  int64_t valid = MB;\n"
        "  if (!whole) {\n"
        "    pr_tokens_batch(&data, PR_VAL, 0x5eed, k, 0, MB, SEQ, %s, %s);%s\n"
        "  } else {\n"
        "    valid = pr_tokens_val_seq_batch(&data, k, MB, SEQ, %s, %s);%s\n"
        "    loss_rows = valid;\n    weight = (double)valid;\n  }\n  (void)valid;\n",
        X, Y, up, X, Y, up);
  else
    out(e,
        "  (void)whole;\n  %s\n  int64_t valid = pr_table_val_batch(&data, k, MB, in_);%s\n"
        "  loss_rows = valid;\n  double weight = (double)valid;\n",
        feed_dsts(e, h), cu_upload_inputs(e, h, "  "));
  for (int i = 0; i < e->rp->nvs; i++) {
    int v = e->rp->vs[i];
    for (int c = 0; c < P->nch; c++) {
      const Channel *ch = &P->ch[c];
      if (ch->grad || ch->to_v != v) continue;
      if (is_local(e, ch)) {
        out(e, "  %s // from stage %d of this rank\n", local_copy(e, ch, 0), ch->from_v);
        continue;
      }
      const char *what = cstring(e, arena_printf(e->a, "eval F(v%d)", v));
      int s = st->recv_of[c];
      const char *upl = recv_upload(e, s, 0, ch->dst);
      out(e, "  pr_comm_post_recv(%d, 0, %s);\n  pr_comm_wait_recv(%d, 0, %s);\n%s%s%s", s,
          msg_buf(e, s, 0, ch->dst), s, what, upl ? "  " : "", upl ? upl : "", upl ? "\n" : "");
    }
    out(e, "  F_%d(0);\n%s", v, v == va ? count_correct(e) : "");
    for (int c = 0; c < P->nch; c++) {
      const Channel *ch = &P->ch[c];
      if (ch->grad || ch->from_v != v || is_local(e, ch)) continue;
      out(e, "  %s\n", send_text(e, st->send_of[c], 0, ch->t));
    }
  }
  const Tensor *pname;
  out(e, "%s", predict_copy(e, predict_output(e, &pname)));
  out(e, "%s  loss_rows = MB;\n  r->weight = weight;\n",
      e->comm ? "  pr_comm_wait_sends();\n" : "");
  if (lv >= 0) {
    out(e, "  r->loss = %s;\n", cu_scalar(e, loss));
  } else {
    int lr = 0; // the rank of the stage with the loss (the last; zb-v: rank 0)
    for (int v = 0; v < P->nv; v++)
      if (P->vs[v].has_loss) lr = P->vs[v].rank;
    out(e, "  r->loss = 0; // the loss is rank %d's\n", lr);
  }
  out(e, "}\n\n");
}
