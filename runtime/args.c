// args.c: placeholder until implemented.
#include "pipert.h"
