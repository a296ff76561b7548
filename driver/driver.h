// driver.h: what the driver's files share. The command line is parsed by one table of options
// (options.c) into a Config, which the cross-option rules (rules.c) check and complete; the
// commands (commands.c) then run the pass table (passes.c) on a Driver, which holds that Config
// and what the passes make, and print their output (report.c). main.c strings them together.
//
// Exit status: 0 ok, 1 error in the model (or a run), 2 usage error.
#ifndef PIPEC_DRIVER_H
#define PIPEC_DRIVER_H

#include <stdbool.h>
#include <stdio.h>

#include "../codegen/codegen.h"
#include "../compiler/comm.h"
#include "../compiler/costs.h"
#include "../compiler/diag_out.h"
#include "../compiler/memplan.h"
#include "../compiler/partition.h"
#include "../compiler/passes.h"
#include "../compiler/pipeline.h"
#include "../compiler/precision.h"
#include "../compiler/recompute.h"
#include "../compiler/sched_csv.h"
#include "../compiler/schedule.h"
#include "../compiler/simulate.h"
#include "../compiler/topology.h"
#include "../compiler/training.h"

#ifndef PIPEC_VERSION
#define PIPEC_VERSION "0.0.0"
#endif

enum { EXIT_MODEL = 1, EXIT_USAGE = 2, MAX_PASSES = 16 };

// The options, one row each in options.c's table (in --help's order of the long options).
typedef enum OptId {
  O_DEFINE,      // -D, --define NAME=VALUE
  O_DUMP_AFTER,  // --dump-after=PASS[,PASS...]
  O_STOP_AFTER,  // --stop-after=PASS
  O_OUTPUT,      // -o, --output DIR
  O_TARGET,      // --target cpu|cuda
  O_SET,         // --set KEY=VALUE
  O_BATCH,       // --batch N
  O_MICROBATCH,  // --microbatches M
  O_STEPS,       // --steps N
  O_NO_BUILD,    // --no-build
  O_NO_FUSE,     // --no-fuse
  O_TRAINING,    // --training FILE
  O_WEIGHTS,     // --weights FILE
  O_DATA_FILE,   // --data-file NAME=PATH
  O_DEPFILE,     // --depfile FILE
  O_SVG,         // --svg FILE
  O_JSON,        // --json FILE
  O_EXPORT_CSV,  // --export-csv FILE
  O_TOPOLOGY,    // --topology FILE.xml
  O_TRACE,       // --trace FILE
  O_TRACE_STEP,  // --trace-step N
  O_LIST_OPS,    // --list-ops
  O_TIME_PASSES, // --time-passes
  O_HELP,        // -h, --help
  O_VERSION,     // -V, --version
  O_MARCH,       // --march=native
  O_STAGES,      // --stages S
  O_REPLICAS,    // --replicas D | D0,D1,..
  O_PRECISION,   // --precision f32|bf16|fp16
  O_SPLIT,       // --split NAME[,NAME...]
  O_FLOPS_RATE,  // --flops-rate GFLOPS
  O_BANDWIDTH,   // --bandwidth GBS
  O_MEM_CAP,     // --mem-cap BYTES
  O_COSTS,       // --costs FILE
  O_RECOMPUTE,   // --recompute all|none|STAGES
  O_SCHEDULE,    // --schedule X
  O_VIRTUAL,     // --virtual V
  O_CUDA_ARCH,   // --cuda-arch LIST
  O_COMM,        // --comm mpi
  O_DIAG_FORMAT, // --diagnostics-format=FORMAT
  NOPTS          // count
} OptId;

// The commands, as bits of an option's "commands that accept it" (options.c).
enum {
  CMD_CHECK = 1 << 0,   // check
  CMD_PRINT = 1 << 1,   // print
  CMD_PLAN = 1 << 2,    // plan
  CMD_COMPILE = 1 << 3, // compile
  CMD_RUN = 1 << 4,     // run
  CMD_PROFILE = 1 << 5, // profile
  CMD_IMPORT = 1 << 6,  // import
};

// The command line: what options.c parses into it and rules.c checks and completes.
typedef struct Config {
  const char *command;       // check, print, ...
  const char *model;         // model file path
  const char *training_file; // --training F: a .pt2's training section (docs/import.md)
  const char *weights_file;  // import --weights F: where the archive's weights go
  const char **data_files;   // --data-file NAME=PATH (a .pt2's data section)
  int ndata_files;           // entries in data_files
  const char *dump_after;    // --dump-after's list of pass names (comma-separated) or NULL
  const char *stop_after;    // --stop-after's pass name or NULL
  bool time_passes;          // print pass timings to stderr
  DiagFormat diag_format;    // --diagnostics-format (text, json, sarif)
  const char **defines;      // -D NAME=VALUE
  int ndefines;              // entries in defines
  const char **sets;         // --set KEY=VALUE (training overrides)
  int nsets;                 // entries in sets
  const char *out_dir;       // -o DIR
  const char *target;        // --target
  const char *cuda_arch;     // --cuda-arch LIST (cuda target; NULL: CMake's PIPEC_CUDA_ARCHS)
  bool march_native;         // --march=native: build the program for this machine
  bool no_fuse;              // --no-fuse: one kernel call per node of the model (fuse.c, segment.c)
  bool no_build;       // --no-build: compile writes the sources and a manifest, builds nothing
  const char *depfile; // --depfile FILE: a Make-style dependency file (compile, run) or NULL
  char *cmdline;       // the command line as typed (getopt permutes argv)
  char **prog_args;    // run: arguments after "--" for the program
  int nprog_args;      // count
  const char *positional[2]; // the command and the model file as given (NULL: missing)
  int npos;                  // count
  PartitionOptions po;       // --stages, --split, --flops-rate, --bandwidth, --mem-cap
  SchedKind sched;           // --schedule (S > 1; default 1f1b)
  int virt;               // --virtual V: stages per rank (interleaved, zb-v; partition cuts S x V)
  int replicas;           // --replicas D: S x D ranks, each stage on D replicas (0: not given)
  const char *rep_list;   // --replicas D0,D1,..: per-stage counts as given (NULL: one count)
  int *rep_counts;        // those counts, one per stage (PipeDream's uneven form)
  int nrep_counts;        // count
  bool uneven;            // those counts differ: PipeDream's uneven form (compiler/uneven.c)
  DType precision;        // --precision: DT_F32 (default), DT_BF16, DT_F16 (precision.c)
  bool virt_given;        // --virtual was on the command line (zb-v implies V = 2 without it)
  const char *svg;        // plan --svg FILE: the schedule's picture (compiler/plan_out.c) or NULL
  const char *json;       // plan --json FILE: the plan as data or NULL
  const char *sched_csv;  // --schedule FILE.csv: a custom schedule (compiler/sched_csv.c) or NULL
  const char *export_csv; // plan --export-csv FILE: the schedule in that CSV form, or NULL
  const char *topology;   // --topology FILE.xml: the machine's NCCL topology or NULL
  const char *trace;      // plan --trace FILE: --svg draws this --trace file's times, or NULL
  int trace_step;         // plan --trace-step N: its step to draw (-1: the first traced)
  const char *costs_path; // --costs FILE: measured costs (costs.h) or NULL
  bool given[NOPTS];      // per option: it was on the command line
} Config;

typedef struct Command Command;

// One compilation: the checked command line, the command, and what the passes make.
typedef struct Driver {
  Config cfg;            // the command line (options.c, rules.c)
  const Command *cmd;    // the command (commands.c; NULL until rules.c found it)
  bool dump[MAX_PASSES]; // per pass row: print its result after it ran
  int last;              // the last pass row to run
  const char *out;       // where codegen writes (out_dir or out/MODEL-NAME)
  bool build;            // codegen also builds OUT/bin/train (compile, run)
  bool profile;          // the profile command: codegen with timing hooks, into a temporary dir
  const char *prof_out;  // profile: the costs file written (-o; default costs.json)
  Diag diag;             // diagnostics for the model file
  Arena arena;           // compiler memory
  Source src;            // the model file, parsed (source_load)
  Graph graph;           // the IR
  TrainConfig tc;        // training configuration (training pass)
  Program prog;          // per-rank action lists (schedule pass) and each rank's memory plan
                         // (memplan pass: prog.ranks[r].plan)
  SchedStats stats;      // S > 1: the lock-step simulation's prediction (schedule's checker)
  CsvSchedule csv;       // --schedule FILE.csv, read before the passes (its rows give S and V)
  Topology topo;         // --topology's file read (compiler/topology.c)
  int *gpu_of_rank;      // per rank its GPU (index into topo.gpu): the placement
  Costs costs;           // the costs file, read before the passes
  Diag costs_diag;       // its diagnostics (FILE:LINE:COL of the costs file)
} Driver;

// A command: the passes it runs and what it prints once they ran (commands.c).
struct Command {
  const char *name;          // check, print, ...
  unsigned bit;              // its CMD_ bit
  const char *last;          // the last pass it runs (unless --dump-after/--stop-after say)
  const char *needs;         // the last pass its output needs (stopped earlier: no output)
  bool build;                // codegen also builds OUT/bin/train
  int (*finish)(Driver *dr); // its output; returns the exit status
};

// options.c: the option table. Parses argv into dr->cfg; returns -1 to go on, else the exit
// status (a usage error's 2; 0 after --help, --version, --list-ops).
int options_parse(Driver *dr, int argc, char **argv);
// The option's name as --help spells it (no dashes).
const char *option_name(OptId id);
// Where option id's row says it does not belong with the command line, its message; else NULL.
const char *option_misuse(Driver *dr, OptId id);
// --help.
void driver_usage(FILE *f);
// "pipec: MESSAGE" and the --help hint on stderr; returns EXIT_USAGE.
int driver_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// rules.c: the cross-option rules in order; 0 when the command line holds, else the usage
// error's exit status (its message printed). Completes dr->cfg (zb-v's V, S x V, profile).
int rules_check(Driver *dr);

// passes.c: the pass table.
int find_pass(const char *name, size_t len);
const char *pass_list(Arena *a);
void passes_help(FILE *f);
bool run_passes(Driver *dr);
// --dump-after and --stop-after into dr->dump and dr->last; NULL or the usage message.
const char *select_passes(Driver *dr);
void dump_plan(Driver *dr, FILE *out);
const char *src_ext(const Driver *dr);
const char *mangle_dir(Arena *a, const char *name);
double clock_seconds(void);

// commands.c: the commands.
const Command *command_find(const char *name);
int run_import(Driver *dr, const char *model);
int run_command(Driver *dr);

// report.c: what the commands print.
void print_summary(const Graph *g);
int finish_plan_pipeline(Driver *dr);
void print_replicas(const Driver *dr);
void print_compiled(Driver *dr);

#endif
