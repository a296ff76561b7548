// pipec plan --svg and --json: the compiled schedule drawn (one row per rank, time left to right,
// F / B / W boxes at the simulator's predicted start and end, sends as arrows, bubbles as empty
// space, a time axis and a legend) and the whole plan as data. Both read only the Program and
// schedule_predict's per-action times: no second cost model. Output is deterministic: fixed
// number formats, actions in list order. Each file is written to FILE.tmp and renamed over FILE.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <libxml/xmlwriter.h>

#include "files.h"
#include "plan_out.h"
#include "schedule.h"
#include "simulate.h"

enum {
  SVG_LEFT = 70,   // px left of the time axis (rank labels)
  SVG_PLOT = 1000, // px of the plot's width (the predicted step)
  SVG_TOP = 40,    // px above the first row (title)
  SVG_ROW = 40,    // px per rank row
  SVG_BOX = 28,    // px of a box's height
};

static bool compute(ActionKind k) {
  return k == ACT_F || k == ACT_B || k == ACT_W;
}

// A tick step of 1, 2 or 5 times a power of ten giving about 5 to 10 ticks over span.
static double tick_step(double span) {
  double e = pow(10, floor(log10(span / 5))), s = e;
  if (span / s > 10) s = 2 * e;
  if (span / s > 10) s = 5 * e;
  return s;
}

// xmlTextWriter calls return < 0 on an error: the first one is remembered.
typedef struct Svg {
  xmlTextWriterPtr w; // the writer (into memory)
  bool bad;           // a call failed
  double scale;       // px per second
} Svg;

static void attr(Svg *s, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void attr(Svg *s, const char *name, const char *fmt, ...) {
  char buf[256];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (xmlTextWriterWriteAttribute(s->w, BAD_CAST name, BAD_CAST buf) < 0) s->bad = true;
}

static void start(Svg *s, const char *el) {
  if (xmlTextWriterStartElement(s->w, BAD_CAST el) < 0) s->bad = true;
}

static void end(Svg *s) {
  if (xmlTextWriterEndElement(s->w) < 0) s->bad = true;
}

static void text(Svg *s, const char *t) {
  if (xmlTextWriterWriteString(s->w, BAD_CAST t) < 0) s->bad = true;
}

static void label(Svg *s, double x, double y, const char *anchor, const char *t) {
  start(s, "text");
  attr(s, "x", "%.2f", x);
  attr(s, "y", "%.2f", y);
  attr(s, "text-anchor", "%s", anchor);
  text(s, t);
  end(s);
}

static const char *fill_of(ActionKind k) {
  return k == ACT_F ? "#4e79a7" : k == ACT_B ? "#59a14f" : "#f28e2b";
}

static double xof(const Svg *s, double t) {
  return SVG_LEFT + t * s->scale;
}

// The RECV of (channel c, microbatch m): its rank and index (none: -1).
static void find_recv(const Program *p, int c, int m, int *rank, int *at) {
  *rank = *at = -1;
  int r = p->vs[p->ch[c].to_v].rank;
  for (int i = 0; i < p->ranks[r].nacts; i++) {
    const Action *x = &p->ranks[r].acts[i];
    if (x->kind == ACT_RECV && x->ch->id == c && x->m == m) *rank = r, *at = i;
  }
}

// measured: NULL for the prediction, else what the times are ("step 1 of T.json"): the title and
// the axis say so.
static bool write_svg(const Program *p, const char *sched, const SchedStats *st, const char *path,
                      const char *measured, Diag *d) {
  xmlBufferPtr buf = xmlBufferCreate();
  Svg s = {xmlNewTextWriterMemory(buf, 0), false, st->span > 0 ? SVG_PLOT / st->span : 1};
  if (!s.w) {
    xmlBufferFree(buf);
    diag_error(d, (Loc){0, 0}, "cannot write '%s': out of memory", path);
    return false;
  }
  int S = p->nranks, V = p->nv / S;
  double width = SVG_LEFT + SVG_PLOT + 30, axis_y = SVG_TOP + S * SVG_ROW + 6;
  double height = axis_y + 70;
  xmlTextWriterSetIndent(s.w, 1);
  if (xmlTextWriterStartDocument(s.w, NULL, "UTF-8", NULL) < 0) s.bad = true;
  start(&s, "svg");
  attr(&s, "xmlns", "http://www.w3.org/2000/svg");
  attr(&s, "width", "%.0f", width);
  attr(&s, "height", "%.0f", height);
  attr(&s, "font-family", "sans-serif");
  attr(&s, "font-size", "11");
  attr(&s, "data-x0", "%d", SVG_LEFT);
  attr(&s, "data-px-per-s", "%.6g", s.scale);
  start(&s, "defs");
  start(&s, "marker");
  attr(&s, "id", "arrow");
  attr(&s, "markerWidth", "6");
  attr(&s, "markerHeight", "6");
  attr(&s, "refX", "6");
  attr(&s, "refY", "3");
  attr(&s, "orient", "auto");
  start(&s, "path");
  attr(&s, "d", "M0,0 L6,3 L0,6 z");
  attr(&s, "fill", "#555");
  end(&s);
  end(&s);
  end(&s);
  char t[512];
  snprintf(t, sizeof t,
           "%s: %d ranks, %d stage%s per rank, %d microbatch%s, %s step %.3f ms%s%s%s, "
           "bubble %.1f%%",
           sched, S, V, V == 1 ? "" : "s", p->M, p->M == 1 ? "" : "es",
           measured ? "measured" : "predicted", st->span * 1e3, measured ? " (" : "",
           measured ? measured : "", measured ? ")" : "", st->bubble * 100);
  label(&s, SVG_LEFT, 20, "start", t);
  // Rows: a label, a faint band (idle time shows as the band), the compute boxes.
  for (int r = 0; r < S && !s.bad; r++) {
    const RankProgram *rp = &p->ranks[r];
    double y = SVG_TOP + r * SVG_ROW;
    snprintf(t, sizeof t, "rank %d", r);
    label(&s, SVG_LEFT - 8, y + SVG_BOX / 2.0 + 4, "end", t);
    start(&s, "g");
    attr(&s, "id", "rank%d", r);
    start(&s, "rect");
    attr(&s, "class", "band");
    attr(&s, "x", "%d", SVG_LEFT);
    attr(&s, "y", "%.2f", y);
    attr(&s, "width", "%d", SVG_PLOT);
    attr(&s, "height", "%d", SVG_BOX);
    attr(&s, "fill", "#f4f4f4");
    end(&s);
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      if (x->kind == ACT_OPT) { // the step end: a thin grey mark (it costs nothing)
        start(&s, "rect");
        attr(&s, "class", "step-end");
        attr(&s, "x", "%.2f", xof(&s, st->t0[r][i]));
        attr(&s, "y", "%.2f", y);
        attr(&s, "width", "2");
        attr(&s, "height", "%d", SVG_BOX);
        attr(&s, "fill", "#999");
        end(&s);
        continue;
      }
      if (!compute(x->kind)) continue;
      double x0 = xof(&s, st->t0[r][i]), w = (st->t1[r][i] - st->t0[r][i]) * s.scale;
      int chunk = stage_chunk(p, x->v);
      start(&s, "rect");
      attr(&s, "class", "%s", action_name(x->kind));
      attr(&s, "x", "%.2f", x0);
      attr(&s, "y", "%.2f", y);
      attr(&s, "width", "%.2f", w);
      attr(&s, "height", "%d", SVG_BOX);
      attr(&s, "fill", "%s", fill_of(x->kind));
      // Shaded by microbatch: later microbatches lighter.
      attr(&s, "fill-opacity", "%.3f", 1 - 0.5 * x->m / (p->M > 1 ? p->M - 1 : 1));
      attr(&s, "stroke", "#fff");
      attr(&s, "data-v", "%d", x->v);
      attr(&s, "data-m", "%d", x->m);
      start(&s, "title");
      snprintf(t, sizeof t, "%s(v%d, m%d) %.3f..%.3f ms", action_name(x->kind), x->v, x->m,
               st->t0[r][i] * 1e3, st->t1[r][i] * 1e3);
      text(&s, t);
      end(&s);
      end(&s);
      if (V > 1)
        snprintf(t, sizeof t, "%d.%d", x->m, chunk);
      else
        snprintf(t, sizeof t, "%d", x->m);
      if (w >= 8) label(&s, x0 + w / 2, y + SVG_BOX / 2.0 + 4, "middle", t);
    }
    end(&s);
  }
  // Sends: an arrow from the SEND's time on its rank to the RECV's on the peer rank.
  start(&s, "g");
  attr(&s, "id", "sends");
  attr(&s, "stroke", "#555");
  attr(&s, "stroke-width", "1");
  for (int r = 0; r < S && !s.bad; r++)
    for (int i = 0; i < p->ranks[r].nacts; i++) {
      const Action *x = &p->ranks[r].acts[i];
      int rr, j;
      if (x->kind != ACT_SEND) continue;
      find_recv(p, x->ch->id, x->m, &rr, &j);
      if (rr < 0) continue; // not reached: schedule_check pairs every SEND with a RECV
      double y0 = SVG_TOP + r * SVG_ROW + (rr > r ? SVG_BOX : 0);
      double y1 = SVG_TOP + rr * SVG_ROW + (rr > r ? 0 : SVG_BOX);
      start(&s, "line");
      attr(&s, "class", "send");
      attr(&s, "x1", "%.2f", xof(&s, st->t0[r][i]));
      attr(&s, "y1", "%.2f", y0);
      attr(&s, "x2", "%.2f", xof(&s, st->t0[rr][j]));
      attr(&s, "y2", "%.2f", y1);
      attr(&s, "data-channel", "%d", x->ch->id);
      attr(&s, "data-m", "%d", x->m);
      attr(&s, "marker-end", "url(#arrow)");
      end(&s);
    }
  end(&s);
  // The time axis in ms.
  start(&s, "g");
  attr(&s, "id", "axis");
  start(&s, "line");
  attr(&s, "x1", "%d", SVG_LEFT);
  attr(&s, "y1", "%.2f", axis_y);
  attr(&s, "x2", "%d", SVG_LEFT + SVG_PLOT);
  attr(&s, "y2", "%.2f", axis_y);
  attr(&s, "stroke", "#000");
  end(&s);
  if (st->span > 0) {
    double step = tick_step(st->span * 1e3);
    for (int k = 0; k * step <= st->span * 1e3 * (1 + 1e-9); k++) {
      double x = xof(&s, k * step / 1e3);
      start(&s, "line");
      attr(&s, "x1", "%.2f", x);
      attr(&s, "y1", "%.2f", axis_y);
      attr(&s, "x2", "%.2f", x);
      attr(&s, "y2", "%.2f", axis_y + 4);
      attr(&s, "stroke", "#000");
      end(&s);
      snprintf(t, sizeof t, "%g", k * step);
      label(&s, x, axis_y + 16, "middle", t);
    }
  }
  label(&s, SVG_LEFT + SVG_PLOT / 2.0, axis_y + 30, "middle",
        measured ? "measured time (ms)" : "predicted time (ms)");
  end(&s);
  // The legend.
  start(&s, "g");
  attr(&s, "id", "legend");
  const char *names[] = {"F forward", "B backward (input gradient; unsplit: all)",
                         "W weight gradient"};
  ActionKind kinds[] = {ACT_F, ACT_B, ACT_W};
  double lx = SVG_LEFT, ly = axis_y + 44;
  for (int k = 0; k < 3; k++) {
    start(&s, "rect");
    attr(&s, "x", "%.2f", lx);
    attr(&s, "y", "%.2f", ly);
    attr(&s, "width", "12");
    attr(&s, "height", "12");
    attr(&s, "fill", "%s", fill_of(kinds[k]));
    end(&s);
    label(&s, lx + 16, ly + 10, "start", names[k]);
    lx += k == 0 ? 110 : k == 1 ? 280 : 140;
  }
  start(&s, "line");
  attr(&s, "x1", "%.2f", lx);
  attr(&s, "y1", "%.2f", ly + 6);
  attr(&s, "x2", "%.2f", lx + 24);
  attr(&s, "y2", "%.2f", ly + 6);
  attr(&s, "stroke", "#555");
  attr(&s, "marker-end", "url(#arrow)");
  end(&s);
  label(&s, lx + 30, ly + 10, "start",
        "send -> receive; grey mark: step end; label: microbatch (.chunk); empty: bubble");
  end(&s);
  end(&s); // svg
  if (xmlTextWriterEndDocument(s.w) < 0) s.bad = true;
  xmlFreeTextWriter(s.w);
  bool ok = !s.bad;
  if (!ok)
    diag_error(d, (Loc){0, 0}, "cannot write '%s': the SVG writer failed", path);
  else
    ok = write_file_atomic(path, (const char *)xmlBufferContent(buf), (size_t)xmlBufferLength(buf),
                           d);
  xmlBufferFree(buf);
  return ok;
}

bool plan_write_svg(const Program *p, const char *sched, const SchedStats *st, const char *path,
                    Diag *d) {
  return write_svg(p, sched, st, path, NULL, d);
}

bool plan_write_measured_svg(const Program *p, const char *sched, const SchedStats *st,
                             const char *what, const char *path, Diag *d) {
  return write_svg(p, sched, st, path, what, d);
}

bool plan_write_json(const Program *p, const char *sched, const SchedStats *st, const char *path,
                     Diag *d) {
  cJSON *root = cJSON_CreateObject();
  cJSON_AddStringToObject(root, "model", p->g->name);
  cJSON_AddStringToObject(root, "schedule", sched);
  cJSON_AddNumberToObject(root, "ranks", p->nranks);
  cJSON_AddNumberToObject(root, "virtual_stages", p->nv);
  cJSON_AddNumberToObject(root, "microbatches", p->M);
  cJSON_AddNumberToObject(root, "predicted_step_s", st->span);
  cJSON_AddNumberToObject(root, "predicted_bubble", st->bubble);
  cJSON_AddNumberToObject(root, "flops_rate", p->part_rate);
  cJSON_AddNumberToObject(root, "bandwidth", p->part_bandwidth);
  if (p->rank_bw) { // --topology: each rank's GPU (one machine) and the links between the ranks
    cJSON *dev = p->rank_device ? cJSON_AddArrayToObject(root, "rank_devices") : NULL,
          *bw = cJSON_AddArrayToObject(root, "rank_bandwidth");
    for (int a = 0; a < p->nrank_bw; a++) {
      if (dev) cJSON_AddItemToArray(dev, cJSON_CreateNumber(p->rank_device[a]));
      cJSON *row = cJSON_CreateArray();
      for (int b = 0; b < p->nrank_bw; b++)
        cJSON_AddItemToArray(row, cJSON_CreateNumber(a == b ? 0 : p->rank_bw[a * p->nrank_bw + b]));
      cJSON_AddItemToArray(bw, row);
    }
  }
  cJSON *stages = cJSON_AddArrayToObject(root, "stages");
  for (int v = 0; v < p->nv; v++) {
    const VStage *s = &p->vs[v];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "v", v);
    cJSON_AddNumberToObject(o, "rank", s->rank);
    cJSON_AddNumberToObject(o, "K", s->K);
    cJSON_AddBoolToObject(o, "split", s->split);
    if (s->f.n) {
      cJSON_AddStringToObject(o, "first_node", s->f.nodes[0]->name);
      cJSON_AddStringToObject(o, "last_node", s->f.nodes[s->f.n - 1]->name);
    }
    cJSON_AddNumberToObject(o, "forward_nodes", s->f.n);
    cJSON *pa = cJSON_AddArrayToObject(o, "parameters");
    for (int i = 0; i < s->nparams; i++)
      cJSON_AddItemToArray(pa, cJSON_CreateString(s->params[i]->name));
    cJSON_AddItemToArray(stages, o);
  }
  cJSON *chs = cJSON_AddArrayToObject(root, "channels");
  for (int c = 0; c < p->nch; c++) {
    const Channel *ch = &p->ch[c];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id", c);
    cJSON_AddStringToObject(o, "tensor", ch->t->name);
    cJSON_AddNumberToObject(o, "bytes", (double)ch->bytes);
    cJSON_AddNumberToObject(o, "from_v", ch->from_v);
    cJSON_AddNumberToObject(o, "to_v", ch->to_v);
    cJSON_AddNumberToObject(o, "from_rank", p->vs[ch->from_v].rank);
    cJSON_AddNumberToObject(o, "to_rank", p->vs[ch->to_v].rank);
    cJSON_AddBoolToObject(o, "grad", ch->grad);
    cJSON_AddItemToArray(chs, o);
  }
  cJSON *ranks = cJSON_AddArrayToObject(root, "rank_programs");
  for (int r = 0; r < p->nranks; r++) {
    const RankProgram *rp = &p->ranks[r];
    cJSON *o = cJSON_CreateObject(), *acts;
    cJSON_AddNumberToObject(o, "rank", r);
    acts = cJSON_AddArrayToObject(o, "actions");
    for (int i = 0; i < rp->nacts; i++) {
      const Action *x = &rp->acts[i];
      cJSON *a = cJSON_CreateObject();
      cJSON_AddStringToObject(a, "kind", action_name(x->kind));
      if (x->kind == ACT_EX_POST || x->kind == ACT_EX_SEND || x->kind == ACT_EX_WAIT) {
        cJSON_AddNumberToObject(a, "message", x->m); // its index in Program.exm, no stage or m
      } else {
        if (x->ch) // SEND, RECV, POST_RECV, WAIT_SEND, COPY
          cJSON_AddNumberToObject(a, "channel", x->ch->id);
        else
          cJSON_AddNumberToObject(a, "v", x->v);
        cJSON_AddNumberToObject(a, "m", x->m);
      }
      cJSON_AddNumberToObject(a, "start_s", st->t0[r][i]);
      cJSON_AddNumberToObject(a, "end_s", st->t1[r][i]);
      cJSON_AddItemToArray(acts, a);
    }
    const Plan *pl = &rp->plan;
    if (pl->region) { // the memplan pass ran (not --stop-after=schedule)
      cJSON *m = cJSON_AddObjectToObject(o, "memory");
      int64_t total = 0;
      for (int k = 0; k < REG_COUNT; k++) total += pl->bytes[k];
      cJSON_AddNumberToObject(m, "params", (double)pl->bytes[REG_PARAMS]);
      cJSON_AddNumberToObject(m, "grads", (double)pl->bytes[REG_GRADS]);
      cJSON_AddNumberToObject(m, "optimizer", (double)pl->bytes[REG_OPT]);
      cJSON_AddNumberToObject(m, "activations", (double)pl->bytes[REG_ACTS]);
      cJSON_AddNumberToObject(m, "constants", (double)pl->const_bytes);
      cJSON_AddNumberToObject(m, "total", (double)total);
      if (pl->work_bytes > 0) // the rank's work area, above the slots
        cJSON_AddNumberToObject(m, "work_area", (double)pl->work_bytes);
      if (pl->conv_bytes > 0) // --precision: the f32 copies of one call's 16-bit operands
        cJSON_AddNumberToObject(m, "conversion_area", (double)pl->conv_bytes);
      cJSON *sl = cJSON_AddArrayToObject(m, "slots");
      for (int k = 0; k < rp->nvs; k++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddNumberToObject(e, "v", rp->vs[k]);
        cJSON_AddNumberToObject(e, "K", pl->slots[rp->vs[k]]);
        cJSON_AddNumberToObject(e, "slot_bytes", (double)pl->slot_stride[rp->vs[k]]);
        cJSON_AddItemToArray(sl, e);
      }
    }
    cJSON_AddItemToArray(ranks, o);
  }
  char *txt = cJSON_Print(root);
  cJSON_Delete(root);
  if (!txt) {
    diag_error(d, (Loc){0, 0}, "cannot write '%s': out of memory", path);
    return false;
  }
  size_t n = strlen(txt);
  txt[n] = '\n'; // cJSON_Print's terminator becomes the final newline
  bool ok = write_file_atomic(path, txt, n + 1, d);
  cJSON_free(txt);
  return ok;
}
