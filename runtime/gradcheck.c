// Finite-difference gradient check used by generated programs' --gradcheck mode: the analytic
// gradient of every parameter against central differences (loss(p+h) - loss(p-h)) / 2h formed in
// double from the program's own forward pass. pr_gradcheck_program runs it over a generated
// program's parameter table.
#include <math.h>

#include "pipert.h"

double pr_gradcheck_param(float *p, const float *g, int64_t n, int64_t max_checks, double h,
                          double (*loss)(void)) {
  int64_t stride = n > max_checks ? n / max_checks : 1;
  double diff2 = 0, fd2 = 0, g2 = 0;
  for (int64_t i = 0; i < n; i += stride) {
    float v = p[i];
    p[i] = (float)(v + h);
    double hp = (double)p[i] - v; // the step actually taken in float
    double lp = loss();
    p[i] = (float)(v - h);
    double hm = v - (double)p[i];
    double lm = loss();
    p[i] = v;
    double fd = (lp - lm) / (hp + hm);
    diff2 += (fd - g[i]) * (fd - g[i]);
    fd2 += fd * fd;
    g2 += (double)g[i] * g[i];
  }
  double scale = sqrt(fd2 > g2 ? fd2 : g2);
  return sqrt(diff2) / (scale > 1e-6 ? scale : 1e-6);
}

int pr_gradcheck_program(const PrProgram *p, const PrOptions *o) {
  for (int i = 0; i < p->nparams; i++)
    if (!p->params[i].tied)
      pr_init_normal(p->params[i].data, p->params[i].n, o->seed, p->params[i].name, 0.0, 0.5);
  p->gradcheck_begin(o);
  p->gradcheck_grads();
  double worst = 0;
  for (int i = 0; i < p->nparams; i++) {
    const PrParam *q = &p->params[i];
    if (!q->grad) continue;
    double err = pr_gradcheck_param(q->data, q->grad, q->n, 64, 1e-2, p->gradcheck_loss);
    printf("gradcheck %-40s %lld elements, relative error %.3g\n", q->name, (long long)q->n, err);
    if (err > worst) worst = err;
  }
  printf("gradcheck worst relative error %.3g (limit 1e-3)\n", worst);
  return worst <= 1e-3 ? 0 : 1;
}
