// kernels.c: placeholder until implemented.
#include "pipert.h"
