// mem.c: placeholder until implemented.
#include "pipert.h"
