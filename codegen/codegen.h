// Codegen's interface: what the driver asks of a back end (check the target can run the graph,
// print and build the program of each rank). The C back end (emit_c.c) prints one C program per
// rank from the rank's action list (pipeline.h) against libpipert (runtime/pipert.h); the builder
// (build.c) builds it with the system's C compiler.
#ifndef PIPEC_CODEGEN_H
#define PIPEC_CODEGEN_H

#include "../compiler/pipeline.h"

typedef struct CodegenOptions {
  const char *out_dir;    // output directory (created)
  const char *cmdline;    // the pipec command line, stamped into the sources
  const char *model_path; // model file (stamped; data paths resolved against it)
  const char *target;     // "cpu" or "cuda" (docs/cuda.md)
  bool build;             // also compile it into out_dir/bin/
  bool march_native;      // build for this machine (-march=native, libpipert-native.a)
  const char *cuda_arch;  // cuda: --cuda-arch, compute capabilities "80,90" (NULL: CMake's)
  bool profile;           // S > 1: time each F, B and W call (pr_prof_act; `pipec profile`)
  bool no_fuse;           // --no-fuse: one kernel call per node (no fused epilogues, segment.c)
} CodegenOptions;

// Why pipec cannot build programs for target (the cuda target without the CUDA toolkit at pipec's
// build time), or NULL when it can.
const char *codegen_target_missing(const char *target);

// The cuda target's architectures (--cuda-arch, else PIPEC_CUDA_ARCHS), checked against those
// the device runtime was built for; NULL after reporting one it lacks through d.
const char *codegen_cuda_archs(const CodegenOptions *o, Arena *a, Diag *d);

// The targets pipec was built to generate programs for: "cpu", or "cpu, cuda" where CMake found
// the CUDA toolkit (nvcc and the device runtime) at pipec's build time (pipec --version).
const char *codegen_targets(void);

// Whether the target can run every tensor of g (the cpu target: f32 and i32 only).
bool codegen_check_target(const Graph *g, const char *target, Diag *d);

// Prints rank `rank`'s program of prog (its action list over its stages, its memory plan) as
// out_dir/rank<rank>.c (the cuda target: rank<rank>.cu, built with nvcc) and builds it into
// out_dir/bin/rank<rank> (S > 1: linked with libpipert_mpi and MPI) or, at S = 1, out_dir/bin/train
// with bin/rank0 a link to it. Errors are reported through d.
bool codegen_c(const Program *prog, int rank, const CodegenOptions *o, Diag *d);

// Builds rank `rank`'s printed source src into out_dir/bin/rank<rank> (linked with libpipert_mpi
// and MPI where codegen_links_mpi) or out_dir/bin/train with bin/rank0 a link to it (build.c).
bool codegen_build(const Program *prog, int rank, const CodegenOptions *o, const char *src,
                   Diag *d);

// Whether the programs link MPI: several ranks, or --replicas (a one-rank program without them has
// no messages, no PrComm and no MPI at all: bin/train, with bin/rank0 a link to it); the one rule
// the printer, the builder, the manifest and the driver share.
bool codegen_links_mpi(const Program *prog);

// Writes out_dir/launch.sh, which runs the job (launch.c): bin/rank0 at S = 1, an MPMD mpirun
// line over bin/rank0 .. bin/rank<S-1> at S > 1, the script's arguments given to every rank.
bool codegen_launch(const Program *prog, const CodegenOptions *o, Diag *d);

// --no-build's OUT/pipec-manifest.json: per rank its source, program and link line, and the
// include directories and compile flags of all (manifest.c; docs/build-integration.md).
bool codegen_manifest(const Program *prog, const CodegenOptions *o, Diag *d);

// --depfile PATH: a Make-style dependency file, what this compile wrote (o->build: the programs
// first) depending on every file pipec read (the model file).
bool codegen_depfile(const Program *prog, const CodegenOptions *o, const char *path, Diag *d);
// Whether the model path and the outputs under out_dir (NULL: the default, out/NAME, which always
// can) can be written in a depfile that make, ninja and CMake all read back alike; false after
// reporting the path and its character (docs/build-integration.md). The driver checks before any
// work; codegen_depfile checks again.
bool codegen_depfile_check(Arena *a, const char *model, const char *out_dir, Diag *d);

// mkdir -p: creates dir and its missing parents (an existing component must be a directory);
// false after reporting why through d.
bool codegen_make_dirs(Arena *a, const char *dir, Diag *d);

#endif
