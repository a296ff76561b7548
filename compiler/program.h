// What the back half of the compiler works on: the training configuration (the model's
// `training` section with command-line overrides) and one rank's static memory plan. The per-rank
// program itself (stages, channels, action lists) is in pipeline.h; codegen's interface is
// codegen/codegen.h.
#ifndef PIPEC_PROGRAM_H
#define PIPEC_PROGRAM_H

#include "../ir/ir.h"
#include "source.h"

typedef enum DataKind {
  DATA_NONE, // no data binding (compile only; the program needs --data)
  DATA_TEXT, // character-level text file: token stream, input (B,T) and target (B,T) shifted
  DATA_U16,  // little-endian uint16 token file, same batching as text
  DATA_CSV,  // CSV(.gz) table: each row's columns into the fed inputs (TrainConfig.feeds)
  DATA_NPY   // .npy tables: one file per fed input
} DataKind;

enum { MAX_FEEDS = 16 }; // most model inputs one data binding fills (PR_MAX_FEEDS in pipert.h)

// One model input the training data fills (training_data.c): the entries of data.input, then
// those of data.target. Every row of a batch fills all of them from the same table row.
typedef struct Feed {
  const Tensor *t;   // the model input
  bool target;       // named by data.target (a class id or a regression value; else data.input)
  int64_t width;     // elements per sample: the product of the input's dims after the batch
  int64_t col;       // csv: its first column (0-based); it reads columns col .. col + width - 1
  const char *file;  // npy: its .npy file, absolute (NULL for other data)
  bool file_rel;     // the file was relative in the model (codegen writes it relative again)
  Loc loc;           // where the model names it (or the input's definition)
} Feed;

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
  const char *data_path;  // data file (resolved against the model file's directory); npy: the
                          // data input's file (the feeds hold each file; data.files: NULL)
  const char *data_labels; // npy: data.labels, the target's file as written (the feed holds it)
  bool data_rel;          // data_path was relative in the model (codegen writes it relative)
  const char *weights_path; // the model's "weights" resolved like data_path (NULL: none)
  bool weights_rel;         // it was relative in the model (codegen writes it relative)
  double train_fraction;  // first fraction for training, rest validation
  double scale;           // tables: f32 columns multiplied by this (i32 columns are not)
  bool shuffle;           // tables (data.shuffle): seeded shuffle, rows drawn with replacement;
                          // false: file order, each step's rows in sequence (runtime/data.c)
  Feed *feeds;            // the fed inputs: data.input's, then data.target's (training_data.c)
  int nfeeds;             // count (0 without a data binding)
  int64_t columns;        // csv: the fields a row has with the default assignment (the feeds'
                          // widths in order); 0 with data.columns (a row needs the last read one)
  const Node *accuracy;   // the classification whose correct predictions every evaluation counts
                          // (training_accuracy; NULL: the evaluation line has no accuracy)
  DType precision;        // --precision: DT_F32 (default), DT_BF16 or DT_F16 (precision.c)
} TrainConfig;

typedef enum Region {
  REG_PARAMS, // parameters (tied parameters share their owner's bytes)
  REG_GRADS,  // parameter gradients: per-use accumulation buffers and combined gradients
  REG_OPT,    // optimizer state (AdamW m and v, SGD momentum)
  REG_ACTS,   // activations, activation gradients, workspaces, constants, data inputs
  REG_COUNT
} Region;

// How a buffer lives, which decides where the plan puts it.
typedef enum BufClass {
  BUF_NONE,  // no storage on this rank
  BUF_PARAM, // a parameter (REG_PARAMS)
  BUF_GRAD,  // a per-step gradient buffer (REG_GRADS)
  BUF_CONST, // a constant, filled once at start, live for the whole run (REG_ACTS, below slots)
  BUF_SAVED, // lives across actions of one microbatch (kept for B/W, a dy kept for W, a received
             // boundary tensor, a loaded input, the loss until LOSS): one copy per slot
  BUF_TEMP,  // lives within one action (REG_ACTS, in the slot, reused by later actions)
  BUF_WORK   // in the rank's one work area above the slots, live within one action: --recompute,
             // a recomputing stage's non-boundary buffer (F, or B with its rerun forward); or a
             // temporary cheaper there than in every slot (K > 1, or several stages sharing it)
} BufClass;

enum { PLAN_OPT_SLOTS = 2 }; // most optimizer state tensors per parameter (AdamW m and v)

// One rank's memory plan. REG_ACTS holds the constants at its bottom, then per virtual stage of
// the rank K slots of slot_stride bytes each: slot k holds everything of the microbatches m with
// m mod K == k on that stage (saved buffers and the temporaries of its actions, placed over the
// stage's one-microbatch timeline LOAD, F, LOSS, B, W). offset[] of a saved or temporary buffer
// (and ws_offset[] of a node's workspace) is its address in slot 0 of stage vstage[]; slot k
// adds k * slot_stride[v]. With channels: a received tensor (Channel.dst) is live from the start
// of its stage's timeline (its receive is posted before F runs) to its last read; a sent tensor
// (Channel.t) is live for the whole timeline, so no other buffer of its slot shares its bytes
// while the send may be in flight; over a channel between two stages of the rank (a copy at its
// RECV) the sent tensor lives to its RECV and the copy from it (memplan.c). The rank holds the
// parameters its nodes read (a tied parameter at its owner's bytes), their optimizer state, the
// gradient buffers its stages make and, for a parameter several stages hold, every use buffer of
// its step-end sum and its sum.
typedef struct Plan {
  Node **fwd;               // forward nodes of one microbatch, in order (stage 0's F segment)
  int nfwd;                 // count
  Node **bwd;               // backward nodes (B, then W if split) of one microbatch, in order
  int nbwd;                 // count
  Node **step;              // step-end nodes (sums of parameter use buffers)
  int nstep;                // count
  int64_t bytes[REG_COUNT]; // size of each region
  Region *region;           // per tensor id: its region
  int64_t *offset;          // per tensor id: byte offset in its region (-1: no storage)
  int64_t *ws_offset;       // per node id: workspace offset in REG_ACTS (-1: none), a TEMP
  int64_t *opt_offset;      // per tensor id (owner params): optimizer state offset in REG_OPT
  int opt_slots;            // optimizer state tensors per parameter (AdamW 2, SGD 1)
  int64_t *opt_offsets;     // per tensor id * PLAN_OPT_SLOTS + k: offset of its optimizer state
                            // k (AdamW 0 = m, 1 = v; SGD 0 = momentum) in REG_OPT, -1 none
  BufClass *cls;            // per tensor id: how it lives
  int nv;                   // virtual stages of the program (length of the per-stage arrays)
  int64_t *slot_stride;     // per virtual stage: bytes of one slot (0: not on this rank)
  int *slots;               // per virtual stage: its K (0: not on this rank)
  int64_t const_bytes;      // bytes of the constants at the bottom of REG_ACTS
  int *vstage;              // per tensor id: the virtual stage whose slots hold it (SAVED and
                            // TEMP; WORK: the stage whose work it is), -1 otherwise (params,
                            // grads, constants, no storage)
  int64_t work_base;        // offset in REG_ACTS of the work area (after the slots)
  int64_t work_bytes;       // its bytes: the largest working set of the rank's recomputing
                            // stages and of the temporaries (buffers, workspaces) moved out of
                            // the slots (memplan.c: temps_to_work; 0: none); one copy, not per slot
                            // (one action at a time)
  int64_t *master_offset;   // --precision: per tensor id (owner params held) the offset in REG_OPT
                            // of its f32 master weights (after its optimizer state), -1 none
  int64_t conv_base;        // --precision: offset in REG_ACTS of the conversion area (at the top)
  int64_t conv_bytes;       // its bytes: the most f32 copies of 16-bit operands one kernel call
                            // of the rank needs (precision_conv_bytes; 0: f32 program)
} Plan;

struct Program;

#endif
