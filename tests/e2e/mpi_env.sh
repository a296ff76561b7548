# shellcheck shell=bash disable=SC2154 # $root is the sourcing script's
# The environment of the pipeline tests' mpirun jobs (sourced after lib.sh).
# More ranks than cores here (ctest -j2 on 2 cores, S up to 4): ranks yield while they wait
# (the runtime and Open MPI both read this); OpenMP threads sleep when idle (the program would
# re-execute itself to set it). In the sanitizer tree, Open MPI's own leaks are suppressed
# (openmpi.supp says why); the variables do nothing to programs built without the sanitizers.
export OMPI_MCA_mpi_yield_when_idle=1
export OMP_WAIT_POLICY=PASSIVE
export LSAN_OPTIONS="${LSAN_OPTIONS:+$LSAN_OPTIONS:}suppressions=$root/tests/e2e/openmpi.supp:print_suppressions=0"
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}fast_unwind_on_malloc=0"
