# shellcheck shell=bash
# The environment of the pipeline tests' mpirun jobs (sourced after lib.sh). More ranks than cores
# here (ctest -j2 on 2 cores, S up to 4): ranks yield while they wait (the runtime and Open MPI
# both read this); OpenMP threads sleep when idle (the program would re-execute itself to set it).
# (In the sanitizer tree, the runtime itself tells LeakSanitizer to ignore Open MPI's own
# allocations: runtime/comm_mpi.c.)
export OMPI_MCA_mpi_yield_when_idle=1
export OMP_WAIT_POLICY=PASSIVE
