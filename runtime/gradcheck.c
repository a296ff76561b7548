// Finite-difference gradient check used by generated programs' --gradcheck mode: the analytic
// gradient of every parameter against central differences (loss(p+h) - loss(p-h)) / 2h formed in
// double from the program's own forward pass.
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
