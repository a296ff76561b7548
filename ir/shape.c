// Dtypes and shapes: names, sizes, equality, element counts and printing.
#include <stdio.h>
#include <string.h>

#include "ir.h"

static const char *const dtype_names[DT_COUNT] = {"f32", "bf16", "f16", "i32"};
static const int dtype_sizes[DT_COUNT] = {4, 2, 2, 4};

const char *dtype_name(DType t) {
  return (unsigned)t < DT_COUNT ? dtype_names[t] : "?";
}
int dtype_size(DType t) {
  return (unsigned)t < DT_COUNT ? dtype_sizes[t] : 0;
}
int tensor_elem_size(const Tensor *t) {
  return t->half ? 2 : dtype_size(t->dtype);
}
bool dtype_is_float(DType t) {
  return t == DT_F32 || t == DT_BF16 || t == DT_F16;
}

bool dtype_parse(const char *s, DType *out) {
  for (int i = 0; i < DT_COUNT; i++)
    if (strcmp(s, dtype_names[i]) == 0) {
      *out = (DType)i;
      return true;
    }
  return false;
}

bool dim_eq(Dim a, Dim b) {
  return a.n == b.n && a.b == b.b;
}

bool shape_eq(const Shape *a, const Shape *b) {
  if (a->rank != b->rank) return false;
  for (int i = 0; i < a->rank; i++)
    if (!dim_eq(a->d[i], b->d[i])) return false;
  return true;
}

int64_t shape_numel(const Shape *s, int64_t batch) {
  int64_t n = 1;
  for (int i = 0; i < s->rank; i++) {
    int64_t d = s->d[i].n;
    if (s->d[i].b && __builtin_mul_overflow(d, batch, &d)) return -1;
    if (__builtin_mul_overflow(n, d, &n) || n > PIPEC_MAX_NUMEL) return -1;
  }
  return n;
}

const char *dim_str(char *buf, int cap, Dim d, const char *batch_sym) {
  if (!d.b)
    snprintf(buf, (size_t)cap, "%lld", (long long)d.n);
  else if (d.n == 1)
    snprintf(buf, (size_t)cap, "%s", batch_sym);
  else
    snprintf(buf, (size_t)cap, "%s*%lld", batch_sym, (long long)d.n);
  return buf;
}

const char *shape_str(char *buf, int cap, const Shape *s, const char *batch_sym) {
  int len = snprintf(buf, (size_t)cap, "(");
  for (int i = 0; i < s->rank && len < cap; i++) {
    char d[64];
    len += snprintf(buf + len, (size_t)(cap - len), "%s%s", i ? "," : "",
                    dim_str(d, sizeof d, s->d[i], batch_sym));
  }
  if (len < cap) snprintf(buf + len, (size_t)(cap - len), ")");
  return buf;
}
