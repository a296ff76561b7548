// The action lists' readers (schedule.h): action names and texts, the list's checker, which
// verifies the counts and orders of pipeline-semantics.md §7 for any number of ranks and virtual
// stages, and its stable text dump.
//
// Every schedule, the one-rank case included (pass_schedule, compiler/schedules.c), is built and
// lowered by sched_build or sched_lower (schedules.c); this file holds what reads a built list.
// The checker indexes the actions by (kind, v, m) in one pass over each list: linear in the number
// of actions.
#include <string.h>

#include "pipeline.h"
#include "schedule.h"

const char *action_name(ActionKind k) {
  static const char *const names[ACT_COUNT] = {
      "LOAD", "F",          "LOSS",    "B",       "W",         "SEND",
      "RECV", "TIED_SUM",   "NORM",    "OPT",     "POST_RECV", "WAIT_SEND",
      "COPY", "WAIT_SENDS", "EX_POST", "EX_SEND", "EX_WAIT"};
  return k >= 0 && k < ACT_COUNT ? names[k] : "?";
}

// Whether kind k names a channel (SEND, RECV, the marks POST_RECV, WAIT_SEND, and COPY).
static bool comm_kind(ActionKind k) {
  return k == ACT_SEND || k == ACT_RECV || action_mark(k) || k == ACT_COPY;
}

void action_text(const Action *x, char *buf, size_t cap) {
  if (x->kind >= ACT_EX_POST && x->kind <= ACT_EX_WAIT)
    snprintf(buf, cap, "%s(x%d)", action_name(x->kind), x->m);
  else if (comm_kind(x->kind))
    snprintf(buf, cap, "%s(c%d, m%d)", action_name(x->kind), x->ch->id, x->m);
  else if (x->m >= 0)
    snprintf(buf, cap, "%s(v%d, m%d)", action_name(x->kind), x->v, x->m);
  else
    snprintf(buf, cap, "%s", action_name(x->kind));
}

ActionKind channel_maker(const Program *p, const Channel *c) {
  const Node *pn = c->t->producer;
  return !c->grad ? ACT_F : p->vs[c->from_v].split && pn && pn->role == ROLE_WGT ? ACT_W : ACT_B;
}

// ---- Checker

// Index of the first action per (kind, v, m) (or per (kind, channel, m)); -1 where none.
typedef struct Seen {
  int rank; // rank of the action
  int at;   // its index in that rank's list
} Seen;

typedef struct Check {
  const Program *p;
  Diag *d;
  Seen *vm[ACT_COUNT]; // LOAD, F, LOSS, B, W: per v * M + m; SEND, RECV: per channel * M + m
  Seen *vstep;         // TIED_SUM per v
  Seen *ex[3];         // EX_POST, EX_SEND, EX_WAIT per exchange message id
} Check;

static void act_text(char *buf, size_t cap, const Action *x) {
  if (x->kind >= ACT_EX_POST && x->kind <= ACT_EX_WAIT)
    snprintf(buf, cap, "%s(x%d)", action_name(x->kind), x->m);
  else if (comm_kind(x->kind))
    snprintf(buf, cap, "%s(c%d, m%d)", action_name(x->kind), x->ch ? x->ch->id : -1, x->m);
  else if (x->m >= 0)
    snprintf(buf, cap, "%s(v%d, m%d)", action_name(x->kind), x->v, x->m);
  else if (x->v >= 0)
    snprintf(buf, cap, "%s(v%d)", action_name(x->kind), x->v);
  else
    snprintf(buf, cap, "%s", action_name(x->kind));
}

static bool err(Check *c, int rank, int at, const Action *x, const char *what) {
  char t[64];
  act_text(t, sizeof t, x);
  diag_error(c->d, (Loc){0, 0}, "schedule: rank %d action %d %s: %s", rank, at, t, what);
  return false;
}

// A step-end message action at i of rank r: rank-wide, on the rank that sends (EX_SEND) or
// receives (EX_POST, EX_WAIT) its exchange message, at most once; indexed in c->ex.
static bool step_msg_ok(Check *c, const RankProgram *r, int i, const Action *x) {
  const Program *p = c->p;
  char why[96];
  if (x->v != -1) return err(c, r->rank, i, x, "a rank-wide action has no stage");
  if (x->kind == ACT_WAIT_SENDS)
    return x->m == -1 ? true : err(c, r->rank, i, x, "a step-end action has no microbatch");
  if (x->m < 0 || x->m >= p->nexm)
    return err(c, r->rank, i, x, "not an exchange message of the program");
  const ExMsg *q = &p->exm[x->m];
  int want = x->kind == ACT_EX_SEND ? q->from : q->to;
  if (want != r->rank) {
    snprintf(why, sizeof why, "exchange message x%d is %s by rank %d", x->m,
             x->kind == ACT_EX_SEND ? "sent" : "received", want);
    return err(c, r->rank, i, x, why);
  }
  Seen *s = &c->ex[x->kind - ACT_EX_POST][x->m];
  if (s->at >= 0) {
    snprintf(why, sizeof why, "appears twice (action %d first)", s->at);
    return err(c, r->rank, i, x, why);
  }
  *s = (Seen){r->rank, i};
  return true;
}

// First pass over one rank: range checks, duplicates, and the index of every action.
static bool index_rank(Check *c, const RankProgram *r) {
  const Program *p = c->p;
  char why[128];
  for (int i = 0; i < r->nacts; i++) {
    const Action *x = &r->acts[i];
    if (x->kind < 0 || x->kind >= ACT_COUNT) return err(c, r->rank, i, x, "unknown action kind");
    if (action_step_msg(x->kind)) {
      if (!step_msg_ok(c, r, i, x)) return false;
      continue;
    }
    bool comm = comm_kind(x->kind), per_m = x->kind <= ACT_RECV || comm;
    if (per_m && (x->m < 0 || x->m >= p->M)) {
      snprintf(why, sizeof why, "microbatch out of range (M = %d)", p->M);
      return err(c, r->rank, i, x, why);
    }
    if (!per_m && x->m != -1) return err(c, r->rank, i, x, "a step-end action has no microbatch");
    if (comm) {
      if (!x->ch || x->ch->id < 0 || x->ch->id >= p->nch || &p->ch[x->ch->id] != x->ch)
        return err(c, r->rank, i, x, "not a channel of the program");
      const Channel *ch = x->ch;
      bool out = x->kind == ACT_SEND || x->kind == ACT_WAIT_SEND;
      int v = out ? ch->from_v : ch->to_v;
      if (p->vs[v].rank != r->rank) {
        snprintf(why, sizeof why, "channel c%d %s stage v%d, which runs on rank %d", ch->id,
                 out ? "is sent by" : "is received by", v, p->vs[v].rank);
        return err(c, r->rank, i, x, why);
      }
      bool local = p->vs[ch->from_v].rank == p->vs[ch->to_v].rank;
      if (x->kind != ACT_COPY && local)
        return err(c, r->rank, i, x, "a channel within one rank is a copy, no message");
      if (x->kind == ACT_COPY && !local)
        return err(c, r->rank, i, x, "a channel between two ranks is a message, no copy");
      Seen *s = &c->vm[x->kind][ch->id * p->M + x->m];
      if (s->at >= 0) {
        snprintf(why, sizeof why, "appears twice (rank %d action %d first)", s->rank, s->at);
        return err(c, r->rank, i, x, why);
      }
      *s = (Seen){r->rank, i};
      continue;
    }
    bool rank_wide = x->kind == ACT_NORM || x->kind == ACT_OPT;
    if (rank_wide) {
      if (x->v != -1) return err(c, r->rank, i, x, "a rank-wide action has no stage");
      continue;
    }
    if (x->v < 0 || x->v >= p->nv) {
      snprintf(why, sizeof why, "stage out of range (%d stages)", p->nv);
      return err(c, r->rank, i, x, why);
    }
    const VStage *vs = &p->vs[x->v];
    if (vs->rank != r->rank) {
      snprintf(why, sizeof why, "stage v%d runs on rank %d", x->v, vs->rank);
      return err(c, r->rank, i, x, why);
    }
    if (x->kind == ACT_W && !vs->split)
      return err(c, r->rank, i, x, "W on a stage that does not split B and W");
    if (x->kind == ACT_LOAD && !vs->loads)
      return err(c, r->rank, i, x, "the stage reads no data input");
    if (x->kind == ACT_LOSS && !vs->has_loss)
      return err(c, r->rank, i, x, "the stage does not compute the loss");
    Seen *s = x->kind == ACT_TIED_SUM ? &c->vstep[x->v] : &c->vm[x->kind][x->v * p->M + x->m];
    if (s->at >= 0) {
      snprintf(why, sizeof why, "appears twice (action %d first)", s->at);
      return err(c, r->rank, i, x, why);
    }
    *s = (Seen){r->rank, i};
  }
  return true;
}

// Whether (kind, v, m) is there; reports "missing" when it must be and is not.
static bool need(Check *c, ActionKind k, int v, int m) {
  if (c->vm[k][v * c->p->M + m].at >= 0) return true;
  char t[64];
  Action x = {k, v, m, NULL};
  act_text(t, sizeof t, &x);
  diag_error(c->d, (Loc){0, 0}, "schedule: rank %d: %s is missing", c->p->vs[v].rank, t);
  return false;
}

// a (kind ka) must come before b (kind kb), both of (v, m) on the same rank.
static bool before(Check *c, ActionKind ka, ActionKind kb, int v, int m, const char *rule) {
  const Seen *a = &c->vm[ka][v * c->p->M + m], *b = &c->vm[kb][v * c->p->M + m];
  if (a->at < b->at) return true;
  const RankProgram *r = &c->p->ranks[b->rank];
  char t[64], why[160];
  act_text(t, sizeof t, &r->acts[a->at]);
  snprintf(why, sizeof why, "comes before %s at action %d (%s)", t, a->at, rule);
  return err(c, b->rank, b->at, &r->acts[b->at], why);
}

// Whether stage v's step nodes read tensor t.
static bool step_reads(const VStage *s, const Tensor *t) {
  for (int j = 0; j < s->step.n; j++)
    for (int k = 0; k < s->step.nodes[j]->nin; k++)
      if (s->step.nodes[j]->in[k] == t) return true;
  return false;
}

// The step end's messages of rank ri (lower_step_end.c's rules): a WAIT_SENDS between its last
// SEND and its first TIED_SUM, and between its last EX_SEND and NORM; every exchange action
// after the rank's last F/B/W and before NORM; each exchange message's EX_POST before its
// EX_WAIT, and the EX_WAIT before every TIED_SUM of its rank whose step reads the buffer.
static bool check_step_msgs(Check *c, int ri) {
  const Program *p = c->p;
  const RankProgram *r = &p->ranks[ri];
  int last = -1, first_sum = -1, norm = r->nacts, send = -1, exsend = -1;
  for (int i = 0; i < r->nacts; i++) {
    ActionKind k = r->acts[i].kind;
    if (k == ACT_F || k == ACT_B || k == ACT_W) last = i;
    if (k == ACT_TIED_SUM && first_sum < 0) first_sum = i;
    if (k == ACT_NORM && norm == r->nacts) norm = i;
    if (k == ACT_SEND) send = i;
    if (k == ACT_EX_SEND) exsend = i;
  }
  const char *what[2] = {"SEND", "EX_SEND"};
  int from[2] = {send, exsend}, to[2] = {first_sum < 0 ? norm : first_sum, norm};
  for (int k = 0; k < 2; k++) {
    if (from[k] < 0) continue;
    bool found = false;
    for (int i = from[k] + 1; i < to[k] && !found; i++) found = r->acts[i].kind == ACT_WAIT_SENDS;
    if (found) continue;
    diag_error(c->d, (Loc){0, 0},
               "schedule: rank %d: no WAIT_SENDS between its last %s at action %d and %s at "
               "action %d",
               ri, what[k], from[k], k == 0 && first_sum >= 0 ? "its first TIED_SUM" : "NORM",
               to[k]);
    return false;
  }
  char why[96];
  for (int i = 0; i < r->nacts; i++) {
    const Action *x = &r->acts[i];
    if (x->kind < ACT_EX_POST || x->kind > ACT_EX_WAIT) continue;
    if (i < last) {
      snprintf(why, sizeof why, "comes before the rank's last F/B/W at action %d", last);
      return err(c, ri, i, x, why);
    }
    if (i > norm) {
      snprintf(why, sizeof why, "comes after NORM at action %d", norm);
      return err(c, ri, i, x, why);
    }
  }
  for (int id = 0; id < p->nexm; id++) {
    const ExMsg *q = &p->exm[id];
    for (int k = 0; k < 3; k++) {
      if (c->ex[k][id].at >= 0) continue;
      if ((k == 1 ? q->from : q->to) != ri) continue;
      diag_error(c->d, (Loc){0, 0}, "schedule: rank %d: %s(x%d) is missing", ri,
                 action_name((ActionKind)(ACT_EX_POST + k)), id);
      return false;
    }
    if (q->to != ri) continue;
    int post = c->ex[0][id].at, wait = c->ex[2][id].at;
    if (wait < post) {
      snprintf(why, sizeof why, "comes before its EX_POST at action %d", post);
      return err(c, ri, wait, &r->acts[wait], why);
    }
    for (int i = 0; i < wait; i++) {
      const Action *x = &r->acts[i];
      if (x->kind != ACT_TIED_SUM || !step_reads(&p->vs[x->v], q->buf)) continue;
      snprintf(why, sizeof why, "comes after TIED_SUM(v%d) at action %d, which reads its buffer",
               x->v, i);
      return err(c, ri, wait, &r->acts[wait], why);
    }
  }
  return true;
}

bool schedule_check(const Program *p, Diag *d) {
  Arena scratch;
  arena_init(&scratch);
  Check c = {p, d, {0}, NULL, {0}};
  bool ok = true;
  for (int k = 0; k < ACT_COUNT; k++) {
    size_t n = (size_t)(comm_kind((ActionKind)k) ? p->nch : p->nv) * (size_t)p->M + 1;
    c.vm[k] = ARENA_ARRAY(&scratch, Seen, n);
    for (size_t i = 0; i < n; i++) c.vm[k][i] = (Seen){-1, -1};
  }
  c.vstep = ARENA_ARRAY(&scratch, Seen, p->nv + 1);
  for (int v = 0; v < p->nv; v++) c.vstep[v] = (Seen){-1, -1};
  for (int k = 0; k < 3; k++) {
    c.ex[k] = ARENA_ARRAY(&scratch, Seen, p->nexm + 1);
    for (int i = 0; i < p->nexm; i++) c.ex[k][i] = (Seen){-1, -1};
  }
  for (int r = 0; r < p->nranks && ok; r++) ok = index_rank(&c, &p->ranks[r]);
  // Counts and orders per (v, m).
  for (int v = 0; v < p->nv && ok; v++) {
    const VStage *s = &p->vs[v];
    int prev[2] = {-1, -1}; // action index of the previous m's B and W
    for (int m = 0; m < p->M && ok; m++) {
      ok = need(&c, ACT_F, v, m) && need(&c, ACT_B, v, m) &&
           before(&c, ACT_F, ACT_B, v, m, "B after F");
      if (ok && s->split) ok = need(&c, ACT_W, v, m) && before(&c, ACT_B, ACT_W, v, m, "W after B");
      if (ok && s->loads)
        ok = need(&c, ACT_LOAD, v, m) && before(&c, ACT_LOAD, ACT_F, v, m, "LOAD before F");
      if (ok && s->has_loss)
        ok = need(&c, ACT_LOSS, v, m) && before(&c, ACT_F, ACT_LOSS, v, m, "LOSS after F");
      if (!ok) break;
      // Both accumulate weight gradients (B all of them unsplit, the memory-bound ones split).
      for (int k = 0; k < 1 + s->split && ok; k++) {
        ActionKind acc = k ? ACT_W : ACT_B;
        const Seen *x = &c.vm[acc][v * p->M + m];
        if (x->at < prev[k]) {
          const RankProgram *r = &p->ranks[x->rank];
          char why[160];
          snprintf(why, sizeof why,
                   "comes before %s(v%d, m%d) at action %d (%s of a stage in ascending m)",
                   action_name(acc), v, m - 1, prev[k], action_name(acc));
          ok = err(&c, x->rank, x->at, &r->acts[x->at], why);
        }
        prev[k] = x->at;
      }
    }
  }
  // Channels: the SEND after the action that makes the tensor, the RECV before the one that
  // reads it (F for activations, B for gradients); within one rank the COPY does both.
  for (int i = 0; i < p->nch && ok; i++) {
    const Channel *ch = &p->ch[i];
    ActionKind k = ch->grad ? ACT_B : ACT_F;
    bool local = p->vs[ch->from_v].rank == p->vs[ch->to_v].rank;
    for (int m = 0; m < p->M && ok; m++) {
      const Seen *snd = &c.vm[local ? ACT_COPY : ACT_SEND][i * p->M + m];
      const Seen *rcv = &c.vm[local ? ACT_COPY : ACT_RECV][i * p->M + m];
      const Seen *make = &c.vm[k][ch->from_v * p->M + m], *use = &c.vm[k][ch->to_v * p->M + m];
      if (snd->at < 0 || rcv->at < 0) {
        diag_error(d, (Loc){0, 0}, "schedule: %s(c%d, m%d) is missing",
                   local         ? "COPY"
                   : snd->at < 0 ? "SEND"
                                 : "RECV",
                   i, m);
        ok = false;
        break;
      }
      const RankProgram *rs = &p->ranks[snd->rank], *rr = &p->ranks[rcv->rank];
      if (snd->at < make->at)
        ok = err(&c, snd->rank, snd->at, &rs->acts[snd->at],
                 ch->grad ? "comes before the B that makes its gradient"
                          : "comes before the F that makes its activation");
      else if (rcv->at > use->at)
        ok = err(&c, rcv->rank, rcv->at, &rr->acts[rcv->at],
                 ch->grad ? "comes after the B that reads its gradient"
                          : "comes after the F that reads its activation");
      // The marks: a receive posted before its RECV, a send waited for after its SEND.
      const Seen *post = &c.vm[ACT_POST_RECV][i * p->M + m];
      const Seen *wait = &c.vm[ACT_WAIT_SEND][i * p->M + m];
      char why[96];
      if (ok && post->at > rcv->at) {
        snprintf(why, sizeof why, "comes after its RECV at action %d", rcv->at);
        ok = err(&c, post->rank, post->at, &rr->acts[post->at], why);
      }
      if (ok && wait->at >= 0 && wait->at < snd->at) {
        snprintf(why, sizeof why, "comes before its SEND at action %d", snd->at);
        ok = err(&c, wait->rank, wait->at, &rs->acts[wait->at], why);
      }
    }
  }
  // Step end per rank: one TIED_SUM per stage, then one NORM, then one OPT, after all F/B/W.
  for (int ri = 0; ri < p->nranks && ok; ri++) {
    const RankProgram *r = &p->ranks[ri];
    int last = -1, norm = -1, opt = -1, last_sum = -1;
    for (int i = 0; i < r->nacts && ok; i++) {
      const Action *x = &r->acts[i];
      if (x->kind == ACT_F || x->kind == ACT_B || x->kind == ACT_W) last = i;
      if (x->kind == ACT_TIED_SUM) last_sum = i;
      if (action_mark(x->kind) && (last_sum >= 0 || norm >= 0)) {
        char why[96];
        snprintf(why, sizeof why, "comes after the step end at action %d",
                 last_sum >= 0 ? last_sum : norm);
        ok = err(&c, ri, i, x, why);
      }
      if (x->kind == ACT_NORM || x->kind == ACT_OPT) {
        int *slot = x->kind == ACT_NORM ? &norm : &opt;
        if (*slot >= 0) {
          char why[64];
          snprintf(why, sizeof why, "appears twice (action %d first)", *slot);
          ok = err(&c, ri, i, x, why);
        }
        *slot = i;
      }
    }
    if (!ok) break;
    for (int k = 0; k < r->nvs && ok; k++) {
      int at = c.vstep[r->vs[k]].at;
      if (at < 0) {
        diag_error(d, (Loc){0, 0}, "schedule: rank %d: TIED_SUM(v%d) is missing", ri, r->vs[k]);
        ok = false;
      } else if (at < last) {
        char why[96];
        snprintf(why, sizeof why, "comes before the rank's last F/B/W at action %d", last);
        ok = err(&c, ri, at, &r->acts[at], why);
      }
    }
    if (!ok) break;
    if (norm < 0 || opt < 0) {
      diag_error(d, (Loc){0, 0}, "schedule: rank %d: %s is missing", ri, norm < 0 ? "NORM" : "OPT");
      ok = false;
    } else if (norm < last_sum || norm < last) {
      char why[96];
      snprintf(why, sizeof why, "comes before %s at action %d",
               last_sum > last ? "TIED_SUM" : "the rank's last F/B/W",
               last_sum > last ? last_sum : last);
      ok = err(&c, ri, norm, &r->acts[norm], why);
    } else if (opt < norm) {
      char why[64];
      snprintf(why, sizeof why, "comes before NORM at action %d", norm);
      ok = err(&c, ri, opt, &r->acts[opt], why);
    }
    if (ok) ok = check_step_msgs(&c, ri);
  }
  arena_free(&scratch);
  return ok;
}

// ---- Dump

void schedule_print(const Program *p, FILE *out) {
  const Graph *g = p->g;
  int nsplit = split_stages(p);
  char how[64];
  snprintf(how, sizeof how,
           nsplit == 0       ? "not split"
           : nsplit == p->nv ? "split"
                             : "split on %d of %d stages",
           nsplit, p->nv);
  fprintf(out, "schedule for %s: %d rank%s, %d virtual stage%s, %d microbatch%s, B and W %s\n",
          g->name, p->nranks, p->nranks == 1 ? "" : "s", p->nv, p->nv == 1 ? "" : "s", p->M,
          p->M == 1 ? "" : "es", how);
  for (int v = 0; v < p->nv; v++) {
    const VStage *s = &p->vs[v];
    fprintf(out,
            "stage v%d: rank %d, K %d, F %d nodes, B %d nodes, W %d nodes, step %d nodes, %d "
            "parameters%s%s%s\n",
            v, s->rank, s->K, s->f.n, s->b.n, s->w.n, s->step.n, s->nparams,
            s->loads ? ", loads" : "", s->has_loss ? ", loss" : "",
            !p->split_bw || s->split   ? ""
            : !p->offer || p->offer[v] ? ", B and W fused (the split buys nothing here)"
                                       : ", B whole (as the schedule writes it)");
  }
  for (int i = 0; i < p->nch; i++) {
    const Channel *ch = &p->ch[i];
    fprintf(out, "channel c%d: '%s' v%d -> v%d, %s, tag %d\n", ch->id, ch->t->name, ch->from_v,
            ch->to_v, ch->grad ? "gradient" : "activation", ch->tag);
  }
  for (int ri = 0; ri < p->nranks; ri++) {
    const RankProgram *r = &p->ranks[ri];
    fprintf(out, "rank %d: %d actions\n", r->rank, r->nacts);
    for (int i = 0; i < r->nacts; i++) {
      char t[64];
      act_text(t, sizeof t, &r->acts[i]);
      fprintf(out, "  %s\n", t);
    }
  }
}
