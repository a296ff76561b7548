// cuda_init.c: calls pr_cu_init for tests/cuda/init.sh: `cuda_init DEVICE NEEDED` selects DEVICE
// of a job needing NEEDED GPUs; `cuda_init mem BYTES` then checks a plan of BYTES against the free
// memory; `cuda_init ids` raises the bad-id flag (an embedding id of 99 in a vocabulary of 10).
// `cuda_init scratch` runs an accumulating embedding backward with a pool one byte smaller than
// pr_cu_embedding_bwd_scratch says it needs. Each prints "ok" when pr_cu_init (and the check)
// returned, else the runtime's error stops it.
#include "pipert.h"
#include "pipert_cuda.h"

#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc == 3 && strcmp(argv[1], "mem") == 0) {
    pr_cu_init(0, 1, 256);
    pr_cu_check_plan_memory(strtoull(argv[2], NULL, 10));
  } else if (argc == 2 && strcmp(argv[1], "ids") == 0) {
    pr_cu_init(0, 1, 256);
    int32_t id = 99;
    int32_t *d = pr_cu_alloc_region("ids", 4);
    float *w = pr_cu_alloc_region("w", 40), *y = pr_cu_alloc_region("y", 4);
    pr_cu_upload(d, &id, 4);
    pr_cu_embedding_fwd(y, d, w, 1, 10, 1);
    pr_cu_check_status();
  } else if (argc == 2 && strcmp(argv[1], "scratch") == 0) {
    pr_cu_init(0, 1, pr_cu_embedding_bwd_scratch(8, 10) - 1);
    int32_t *d = pr_cu_alloc_region("ids", 32);
    float *w = pr_cu_alloc_region("dw", 40), *dy = pr_cu_alloc_region("dy", 32);
    pr_cu_embedding_bwd_w(w, dy, d, 8, 10, 1, 1);
    pr_cu_synchronize();
  } else if (argc == 3)
    pr_cu_init(atoi(argv[1]), atoi(argv[2]), 256);
  else
    return 2;
  pr_cu_finish();
  printf("ok\n");
  return 0;
}
