// cut.c: the cut model's arithmetic (cut.h): what a stage covering a unit range holds and reads
// (cut_sums), its memory estimate against the cap, its cost per microbatch
// (partition_stage_cost: FLOPs / rate + the bytes it receives / bandwidth), and the exact
// dynamic program that minimises the slowest stage (partition_dp). The cost model is described
// in partition.c's header and docs/pipeline.md; nothing here knows the graph.
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cut.h"

bool partition_over_cap(const CutProblem *cp, int r, double pbytes, double act, double bnd,
                        int inflight) {
  if (cp->mem_cap <= 0) return false;
  double mem =
      cp->recomp && cp->recomp[r] ? pbytes + act + bnd * inflight : pbytes + act * inflight;
  return mem > cp->mem_cap;
}

int cut_inflight(const CutProblem *cp, int S, int r) {
  if (cp->inflight) return cp->inflight[r];
  return S - r < cp->M ? S - r : cp->M;
}

CutSums cut_sums(const CutProblem *cp, int a, int b) {
  CutSums s = {0};
  for (int u = a; u < b; u++) {
    s.flops += cp->flops[u], s.act += cp->act_bytes[u];
    if (cp->conv_bytes && cp->conv_bytes[u] > s.conv) s.conv = cp->conv_bytes[u];
  }
  for (int i = 0; i < cp->nt; i++) {
    const CutTensor *t = &cp->t[i];
    if (t->from >= a) {
      if (t->from < b && t->nto > 0 && t->to[t->nto - 1] >= b) // sent on, its gradient back
        s.sent += t->bytes * (t->grad ? 2 : 1);
      continue;
    }
    for (int k = 0; k < t->nto; k++)
      if (t->to[k] >= a && t->to[k] < b) {
        s.fwd += t->bytes;
        if (t->grad) s.grad += t->bytes;
        break;
      }
  }
  for (int i = 0; i < cp->np; i++)
    for (int k = 0; k < cp->p[i].nunits; k++)
      if (cp->p[i].units[k] >= a && cp->p[i].units[k] < b) {
        s.pbytes += cp->p[i].bytes;
        break;
      }
  return s;
}

double partition_stage_cost(const CutProblem *cp, int S, int r, int a, int b) {
  CutSums cs = cut_sums(cp, a, b);
  double comm = cs.fwd + cs.grad; // received, its gradient sent back
  int inflight = cut_inflight(cp, S, r);
  if (partition_over_cap(cp, r, cs.pbytes + cs.conv, cs.act, comm + cs.sent, inflight))
    return INFINITY;
  return cs.flops / cp->rate + comm / (cp->stage_bw ? cp->stage_bw[r] : cp->bandwidth);
}

double partition_dp(const CutProblem *cp, int S, int *starts, Arena *a) {
  int n = cp->n;
  if (S < 1 || S > n) return INFINITY;
  // CSR: reads[u] = tensors read by u from an earlier unit; makes[u] = tensors made by u;
  // preads[u] = parameters read by u.
  int *roff = ARENA_ARRAY(a, int, n + 1), *moff = ARENA_ARRAY(a, int, n + 1),
      *poff = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < cp->nt; i++) {
    for (int k = 0; k < cp->t[i].nto; k++) roff[cp->t[i].to[k]]++;
    moff[cp->t[i].from]++;
  }
  for (int i = 0; i < cp->np; i++)
    for (int k = 0; k < cp->p[i].nunits; k++) poff[cp->p[i].units[k]]++;
  int rs = 0, ms = 0, ps = 0;
  for (int u = 0; u <= n; u++) {
    int r = u < n ? roff[u] : 0, m = u < n ? moff[u] : 0, q = u < n ? poff[u] : 0;
    roff[u] = rs, moff[u] = ms, poff[u] = ps;
    rs += r, ms += m, ps += q;
  }
  int *ridx = ARENA_ARRAY(a, int, rs + 1), *midx = ARENA_ARRAY(a, int, ms + 1),
      *pidx = ARENA_ARRAY(a, int, ps + 1);
  int *rf = ARENA_ARRAY(a, int, n + 1), *mf = ARENA_ARRAY(a, int, n + 1),
      *pf = ARENA_ARRAY(a, int, n + 1);
  for (int i = 0; i < cp->nt; i++) {
    for (int k = 0; k < cp->t[i].nto; k++) {
      int u = cp->t[i].to[k];
      ridx[roff[u] + rf[u]++] = i;
    }
    int u = cp->t[i].from;
    midx[moff[u] + mf[u]++] = i;
  }
  for (int i = 0; i < cp->np; i++)
    for (int k = 0; k < cp->p[i].nunits; k++) {
      int u = cp->p[i].units[k];
      pidx[poff[u] + pf[u]++] = i;
    }
  // Prefix sums of FLOPs and activation bytes.
  double *pfl = ARENA_ARRAY(a, double, n + 1), *pact = ARENA_ARRAY(a, double, n + 1);
  for (int u = 0; u < n; u++)
    pfl[u + 1] = pfl[u] + cp->flops[u], pact[u + 1] = pact[u] + cp->act_bytes[u];
  // An upper bound U from the cut that balances FLOPs (where it is feasible): a stage costing
  // U or more cannot be in a better solution, which bounds each sweep below (exact: when the
  // program finds nothing under U, the balanced cut is an optimum).
  double U = INFINITY;
  int *hstarts = ARENA_ARRAY(a, int, S + 1);
  {
    bool ok = true;
    hstarts[0] = 0;
    for (int r = 1, u = 1; r < S && ok; r++) {
      double want = pfl[n] * r / S;
      while (u < n - (S - r) && (pfl[u] < want || (cp->cut_ok && !cp->cut_ok[u]))) u++;
      while (u < n && cp->cut_ok && !cp->cut_ok[u]) u++;
      ok = u < n && u > hstarts[r - 1];
      hstarts[r] = u++;
    }
    if (ok) {
      U = 0;
      for (int r = 0; r < S; r++) {
        double c = partition_stage_cost(cp, S, r, hstarts[r], r + 1 < S ? hstarts[r + 1] : n);
        if (c > U) U = c;
      }
    }
  }
  // f[k * (n + 1) + b]: best slowest stage of units [0, b) in k stages; arg: the last start.
  double *f = ARENA_ARRAY(a, double, (size_t)(S + 1) * (n + 1));
  int *arg = ARENA_ARRAY(a, int, (size_t)(S + 1) * (n + 1));
  for (size_t i = 0; i < (size_t)(S + 1) * (n + 1); i++) f[i] = INFINITY, arg[i] = -1;
  f[0] = 0;
  int *klo = ARENA_ARRAY(a, int, n + 1), *khi = ARENA_ARRAY(a, int, n + 1); // finite f[k][b]
  for (int b = 1; b <= n; b++) klo[b] = S + 1, khi[b] = -1;
  // stamp[t] == b: tensor t counted in the stage [a, b) being grown; -b: made inside it.
  int *tstamp = ARENA_ARRAY(a, int, cp->nt + 1), *pstamp = ARENA_ARRAY(a, int, cp->np + 1);
  double bw_max = cp->bandwidth; // --topology: the fastest stage link bounds every stage's time
  for (int r = 1; cp->stage_bw && r < S; r++)
    if (r == 1 || cp->stage_bw[r] > bw_max) bw_max = cp->stage_bw[r];
  for (int b = 1; b <= n; b++) {
    if (b < n && cp->cut_ok && !cp->cut_ok[b]) continue; // no stage ends here
    // The stage counts k for which [0, b) in k stages and [b, n) in S - k could all cost under
    // U: each stage costs at least its FLOPs / rate (a margin of 1e-9 for rounding).
    int kb_lo = 1, kb_hi = b < n ? S - 1 : S;
    if (U < INFINITY) {
      double lim = U * cp->rate * (1 + 1e-9);
      while (kb_lo <= kb_hi && pfl[b] >= kb_lo * lim) kb_lo++;
      if (b == n) kb_lo = kb_hi; // only k = S ends at n
      while (kb_hi >= kb_lo && b < n && pfl[n] - pfl[b] >= (S - kb_hi) * lim) kb_hi--;
      if (b == n && pfl[b] >= S * lim) kb_lo = kb_hi + 1;
    }
    if (kb_lo > kb_hi) continue;
    double comm = 0, pbytes = 0, bnd = 0; // bnd: bytes received and sent on (--recompute)
    double conv = 0;                      // --precision: the stage's conversion area
    for (int s = b - 1; s >= 0; s--) {
      // The stage becomes [s, b): unit s joins it.
      for (int j = moff[s]; j < moff[s + 1]; j++) {
        int t = midx[j];
        const CutTensor *ct = &cp->t[t];
        if (tstamp[t] == b)
          comm -= ct->bytes * (ct->grad ? 2 : 1), bnd -= ct->bytes * (ct->grad ? 2 : 1);
        if (ct->nto > 0 && ct->to[ct->nto - 1] >= b) bnd += ct->bytes * (ct->grad ? 2 : 1);
        tstamp[t] = -b;
      }
      for (int j = roff[s]; j < roff[s + 1]; j++) {
        int t = ridx[j];
        if (tstamp[t] != b && tstamp[t] != -b) {
          tstamp[t] = b;
          comm += cp->t[t].bytes * (cp->t[t].grad ? 2 : 1);
          bnd += cp->t[t].bytes * (cp->t[t].grad ? 2 : 1);
        }
      }
      for (int j = poff[s]; j < poff[s + 1]; j++) {
        int q = pidx[j];
        if (pstamp[q] != b) pstamp[q] = b, pbytes += cp->p[q].bytes;
      }
      if (cp->conv_bytes && cp->conv_bytes[s] > conv) conv = cp->conv_bytes[s];
      if ((pfl[b] - pfl[s]) / cp->rate >= U) break; // and for every stage starting further left
      if (s > 0 && cp->cut_ok && !cp->cut_ok[s]) continue; // no stage starts here
      double ftime = (pfl[b] - pfl[s]) / cp->rate, time = ftime + comm / bw_max,
             act = pact[b] - pact[s];
      if (time >= U) continue;
      int k1 = klo[s] + 1 > kb_lo ? klo[s] + 1 : kb_lo,
          k2 = khi[s] + 1 < kb_hi ? khi[s] + 1 : kb_hi;
      for (int k = k1; k <= k2; k++) {
        double prev = f[(size_t)(k - 1) * (n + 1) + s];
        if (prev == INFINITY) continue;
        int r = k - 1, inflight = cut_inflight(cp, S, r);
        if (partition_over_cap(cp, r, pbytes + conv, act, bnd, inflight)) continue;
        double tk = cp->stage_bw ? ftime + comm / cp->stage_bw[r] : time;
        if (tk >= U) continue;
        double v = prev > tk ? prev : tk;
        size_t at = (size_t)k * (n + 1) + b;
        if (v < f[at]) f[at] = v, arg[at] = s;
        if (k < klo[b]) klo[b] = k;
        if (k > khi[b]) khi[b] = k;
      }
    }
  }
  double best = f[(size_t)S * (n + 1) + n];
  if (best == INFINITY) {
    if (U < INFINITY) memcpy(starts, hstarts, sizeof(int) * (size_t)S);
    return U;
  }
  for (int k = S, b = n; k >= 1; k--) {
    int s = arg[(size_t)k * (n + 1) + b];
    starts[k - 1] = s;
    b = s;
  }
  return best;
}
