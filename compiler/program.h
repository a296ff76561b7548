// What the back half of the compiler works on: the training configuration (the model's
// `training` section with command-line overrides), the per-rank program (the order in which
// forward, backward and step-end nodes run) and its static memory plan.
#ifndef PIPEC_PROGRAM_H
#define PIPEC_PROGRAM_H

#include "../ir/ir.h"
#include "source.h"

typedef enum DataKind {
  DATA_NONE, // no data binding (compile only; the program needs --data)
  DATA_TEXT, // character-level text file: token stream, input (B,T) and target (B,T) shifted
  DATA_U16,  // little-endian uint16 token file, same batching as text
  DATA_CSV,  // CSV(.gz) table: features into the input (B,F), last column the target (B)
  DATA_NPY   // .npy features and labels
} DataKind;

typedef enum OptKind {
  OPT_ADAMW, // AdamW, decoupled weight decay on params of rank >= 2
  OPT_SGD    // SGD with momentum
} OptKind;

typedef struct TrainConfig {
  int64_t batch;          // rows (sequences) per step
  int64_t microbatches;   // M; batch % M == 0
  int64_t mb_size;        // batch / M: the value of the batch symbol in the program
  int64_t steps;          // optimizer steps
  uint64_t seed;          // init and data seed
  OptKind opt;            // optimizer
  double lr;              // peak learning rate
  double beta1, beta2;    // AdamW betas
  double eps;             // AdamW epsilon
  double weight_decay;    // decoupled (AdamW) or L2 (SGD) weight decay
  double momentum;        // SGD momentum
  int64_t warmup;         // linear warmup steps
  int64_t decay_steps;    // cosine decay ends here (0 = constant lr after warmup)
  double min_lr;          // lr at and after decay_steps
  double grad_clip;       // clip the global gradient norm to this (0 = off)
  int64_t eval_every;     // steps between evaluations (0 = at the end only)
  int64_t eval_batches;   // batches per evaluation (tables: 0 = the whole validation split)
  int64_t log_every;      // steps between progress lines
  DataKind data;          // data binding
  const char *data_path;  // data file (resolved against the model file's directory)
  const char *data_path2; // npy: labels file
  double train_fraction;  // first fraction for training, rest validation
  double scale;           // tables: features multiplied by this
  Tensor *input;          // model input fed with data
  Tensor *target;         // model input fed with targets
} TrainConfig;

// Reads the model's `training` section (defaults where absent) and applies overrides given as
// "key=value" strings (pipec compile --set key=value). Binds the batch symbol to the microbatch.
bool training_parse(const Source *src, Graph *g, const char **overrides, int noverrides,
                    TrainConfig *tc, Diag *d);
// Prints the configuration as read (defaults filled in, overrides applied, data paths resolved):
// one "key value" line per training key, in the keys' table order (pipec --dump-after=training).
void training_print(const Graph *g, const TrainConfig *tc, FILE *out);

typedef enum Region {
  REG_PARAMS, // parameters (tied parameters share their owner's bytes)
  REG_GRADS,  // parameter gradients: per-use accumulation buffers and combined gradients
  REG_OPT,    // optimizer state (AdamW m and v, SGD momentum)
  REG_ACTS,   // activations, activation gradients, workspaces, constants, data inputs
  REG_COUNT
} Region;

typedef struct Plan {
  Node **fwd;               // forward nodes of one microbatch, in order
  int nfwd;                 // count
  Node **bwd;               // backward nodes (B and W) of one microbatch, in order
  int nbwd;                 // count
  Node **step;              // step-end nodes (sums of parameter use buffers)
  int nstep;                // count
  int64_t bytes[REG_COUNT]; // size of each region
  Region *region;           // per tensor id: its region
  int64_t *offset;          // per tensor id: byte offset in its region (-1: no storage)
  int64_t *ws_offset;       // per node id: workspace offset in REG_ACTS (-1: none)
  int64_t *opt_offset;      // per tensor id (owner params): optimizer state offset in REG_OPT
  int opt_slots;            // optimizer state tensors per parameter (AdamW 2, SGD 1)
} Plan;

// Orders the nodes of one rank and assigns every buffer an offset (liveness-based first fit in
// the activation region). Batch symbol bound to tc->mb_size.
bool plan_memory(Graph *g, const TrainConfig *tc, Plan *p, Diag *d);
void plan_print(const Graph *g, const TrainConfig *tc, const Plan *p, FILE *out);
// Warns when the plan's bytes exceed this machine's physical memory (where the generated program
// refuses to start).
void plan_warn_memory(const Plan *p, Diag *d);

typedef struct CodegenOptions {
  const char *out_dir;    // output directory (created)
  const char *cmdline;    // the pipec command line, stamped into the sources
  const char *model_path; // model file (stamped; data paths resolved against it)
  const char *target;     // "cpu"
  bool build;             // also compile it into out_dir/bin/
  bool march_native;      // build for this machine (-march=native, libpipert-native.a)
} CodegenOptions;

// Whether the target can run every tensor of g (the cpu target: f32 and i32 only).
bool codegen_check_target(const Graph *g, const char *target, Diag *d);

// Writes out_dir/rank0.c (and builds out_dir/bin/train). Errors are reported through d.
bool codegen_c(const Graph *g, const TrainConfig *tc, const Plan *p, const CodegenOptions *o,
               Diag *d);

#endif
