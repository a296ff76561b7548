// isa_native.c: pr_isa_name of the --march=native runtime (libpipert-native.a), whose kernels are
// one build, for the machine pipec was built on (isa.c is the portable runtime's choice).
#include "pipert.h"

const char *pr_isa_name(void) {
  return "native (--march=native)";
}
