// The C back end's internal interface, shared by its files, from the bottom up: the emitter
// state and the printing helpers with the two escapers every model string goes through (text.c),
// lines within 100 columns (wrap.c) and loop operands' names (loop_names.c) over them; the
// printing of a node sequence as kernel calls, straight-line or as loops over repeat-block
// instances (segment.c), of the parameter table (params.c), of the decoration around actions and
// kernel calls (emit_trace.c) and of a rank's streams, loaders, train_step and evaluation
// (emit_rank.c) with the batch's way in and out of the tensors (data_io.c); emit_c.c prints the
// whole program over them and build.c builds it.
#ifndef PIPEC_CODEGEN_EMIT_H
#define PIPEC_CODEGEN_EMIT_H

#include <stdio.h>

#include "codegen.h"

typedef struct Streams Streams;       // a rank's message streams (emit_rank.c; none at S = 1)
typedef struct RepBuckets RepBuckets; // --replicas: the gradient exchange's buckets (buckets.c)

typedef struct E {
  FILE *f;               // output
  const Program *prog;   // the program (stages, channels, every rank's actions)
  const RankProgram *rp; // the rank printed
  const Graph *g;        // graph
  const TrainConfig *tc; // training configuration (the batch symbol bound to the microbatch)
  const Plan *p;         // the rank's memory plan
  Arena *a;              // the graph's arena (every string printed is carved from it)
  char **ident;          // per tensor id: C identifier (a macro over its region and offset)
  bool *used;            // per tensor id: some straight-line code names its identifier
  int nloops;            // loops printed so far (names their offset tables)
  bool comm;             // the program has a PrComm and links MPI: several ranks, or --replicas
                         // (S = D = 1: neither, and no --gradcheck functions without it)
  bool cuda;             // the CUDA target: pr_cu_ kernels over device regions (emit_cuda.c)
  Streams *st;           // this rank's message streams (built on first use)
  bool streams;          // the rank has message streams (emit_rank_has_streams, set before any
                         // printing): its long kernels call pr_comm_progress (emit_after_kernel)
  bool profile;          // time each F, B and W call (pr_prof_act; `pipec profile`)
  const RepBuckets *rep; // --replicas: the rank's buckets (rep_buckets), NULL at D = 1
  ActionKind fn;         // the action whose function emit_segment prints (F, B, W, TIED_SUM;
                         // ACT_COUNT: none): its calls' decoration (emit_after_kernel)
  bool fuse;             // emit_segment fuses a product and its elementwise epilogue into one
                         // call where the registry allows it (segment.c; off: --no-fuse, cuda)
} E;

void out(E *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
// Text for a comment that cannot end or open one (see text.c).
const char *comment(E *e, const char *s);
// A C string literal with the string's exact bytes (see text.c).
const char *cstring(E *e, const char *s);
// Lines within 100 columns (wrap.c): statement stmt at indent with a trailing comment of text
// note (NULL: none; text already through comment()), the note above it or the call broken
// between its arguments where the line would be wider; an object-like macro likewise (its value
// after a backslash when it must); cstring's literal as adjacent literals, one per line of the
// string, the lines after the first at indent.
void out_stmt(E *e, const char *indent, const char *stmt, const char *note);
// Comment text (through comment()) as "// " lines at indent, broken at spaces.
void out_comment(E *e, const char *indent, const char *text);
void out_define(E *e, const char *name, const char *value, const char *note);
const char *cstring_split(E *e, const char *s, const char *indent);
// What a loop over repeat-block instances calls an operand (loop_names.c): from the names the
// loop's instances give it, names[0..count), the comment's pattern ("transformer.h[l].ln_1") and
// a C identifier ("l_ln_1"; a gradient "dl_..."; then suffix, NULL: none), not yet unique.
typedef struct LoopName {
  const char *comment; // the names as one pattern, comment text
  const char *ident;   // a C identifier
} LoopName;
// The loop being named: its instance prefix (loop_prefix of its first call's node names; NULL:
// none), which names that follow no pattern lose with their instance numbers in the identifier,
// and its instances (first + step * l): an operand of the previous or next instance is named
// l_prev_... or l_next_....
typedef struct LoopInfo {
  const char *prefix; // "transformer.h." (NULL: none)
  int first, step;    // instance first + step * l at l
} LoopInfo;
void loop_name(E *e, const char *const *names, int count, const LoopInfo *li, const char *suffix,
               LoopName *r);
const char *loop_prefix(E *e, const char *const *names, int count);
// A data path as the program is given it (paths.c): path itself, or when rel (the model gave it
// relative) "$ORIGIN/" and the way from out_dir/bin to it.
const char *codegen_data_path(Arena *a, const char *path, bool rel, const char *out_dir);
// A float literal that round-trips the value ("1.0f", "1e-05f").
const char *flit(E *e, double v);
// t's identifier, marked used (its macro is printed).
const char *tid(E *e, const Tensor *t);
// The virtual stage whose slots hold tensor id (its address adds slot * STRIDE_v), or -1 when
// the tensor is at one address (not slotted, or its stage has K = 1).
int slot_stage(const E *e, int id);
// The same for node n's workspace (slot-relative in the node's stage).
int ws_slot_stage(const E *e, const Node *n);
// " + slot * STRIDE_v" for stage v (v >= 0; STRIDE_v is a long long), "" for v < 0.
const char *slot_term(E *e, int v);
// Region base pointer names, as the generated program calls them.
extern const char *const region_ptr[REG_COUNT];
const char *ctype(DType t);

// Prints the kernel calls of nodes[0..n) in order, one per node; acc is the value of a W node's
// accumulate argument (an expression: "acc", "0"). Runs of instances of a repeat block that are
// structurally identical (the same calls but for their pointers) become one loop over the
// instances with per-instance offsets (segment.c); the rest is straight-line.
void emit_segment(E *e, Node *const *nodes, int n, const char *acc);

// The acc argument of action x's B_v / W_v call in train_step's order: 0 for the first B (or W)
// of its stage in the step, 1 after (B holds the stage's weight gradients unsplit, its
// memory-bound ones split, and both accumulate over the microbatches); 0 for any other action.
// done: per stage, B then W (2 * nv flags, false at the start of train_step).
int emit_acc(bool *done, const Action *x);

// The decoration (emit_trace.c). emit_act prints action x's line of train_step, "  CALL // NOTE"
// (note NULL: no comment), call ("F_1(1);") between its --trace hooks and, with --profile, an F,
// B or W between its timing. emit_after_kernel follows the kernel call of node n in the function
// of action kind e->fn: pr_comm_progress() after a long kernel of F, B or W on a rank with
// message streams, else nothing.
void emit_act(E *e, const Action *x, const char *call, const char *note);
void emit_after_kernel(E *e, const Node *n, const char *indent);

// The replicas' buckets of this rank (buckets.c; --replicas, see there): param[end[k - 1] ..
// end[k]) are bucket k's parameter-table indices, final after this rank's action after[k] (-1: at
// the step end) and, inside it, after node node[k] (its id; -1: after the action as a whole).
struct RepBuckets {
  int *param; // every parameter this rank trains, bucket by bucket
  int n;      // count
  int *end;   // per bucket: the end of its run in param
  int *after; // per bucket: the action that makes it final (-1: none, sent at the step end)
  int *node;  // per bucket: the node of that action after which it is final (-1: the action)
  int nb;     // buckets
  int *first; // per node id: the first bucket final right after it (-1: none)
  int *count; // per node id: the buckets final right after it (first, first + 1, ..)
};
const RepBuckets *rep_buckets(E *e);
// Whether action i of the rank's list makes buckets final from inside its B_v / W_v call (then
// train_step sets rep_final around it).
bool rep_final_action(const RepBuckets *b, int i);
// Whether any action of the rank does (b NULL: none): the program then declares rep_final.
bool rep_any_inside(const RepBuckets *b);
// After node n's kernel call: its buckets' guarded pr_replicas_ready calls (nothing when e->rep
// is NULL or n makes none final); per > 0: inside a loop over repeat-block instances, bucket
// k + l * per (k: the first instance's).
void rep_emit_ready(E *e, const Node *n, const char *indent, int per);
// The repeat block and instance a node belongs to, as segment.c groups them (*blk NULL: none; a
// gradient sum outside any block: the instance whose forward tensor it differentiates). text.c.
void segment_node_key(const Node *n, const char **blk, int *inst);

// A rank's program at any S (emit_rank.c): the PrChannel table CH and the PrComm `comm` (E.comm
// only); the per-stage data loaders load_<v>; train_step from the action list with its channel
// traffic; eval_batches and eval_batch.
void emit_rank_comm(E *e);
// Whether this rank has message streams to other ranks (its compute then calls
// pr_comm_progress: emit_after_kernel). Never at S = 1.
bool emit_rank_has_streams(E *e);
void emit_rank_loaders(E *e);
bool emit_rank_train_step(E *e, Diag *d);
void emit_rank_eval(E *e);

// --predict: the tensor this rank copies into PrEvalBatch.out after eval_batch's forward (the
// model's first output, or its received copy on the loss stage; a float32 tensor whose first
// dimension alone carries the batch), NULL on every rank but the one that holds it; *name
// receives the output's name either way (NULL when the model has no such output). data_io.c.
const Tensor *predict_output(E *e, const Tensor **name);
// The line that copies it ("" for NULL), after the forward of a batch of `valid` samples.
const char *predict_copy(E *e, const Tensor *t);
// The lines that count an evaluation batch's correct predictions into PrEvalBatch (`valid`
// rows) from TrainConfig.accuracy's logits and class ids as that node reads them: printed after
// the forward of the stage that computes it (its logits live until its backward), on its rank
// alone; "" when the model has no accuracy. data_io.c.
const char *count_correct(E *e);

// The CUDA target (emit_cuda.c): the kernel's name on the target (pr_X -> pr_cu_X; the CPU's
// unchanged); the device helpers (dev_scalar, scratch_bytes, cu_ws and ws_bytes, the data
// inputs' host staging stage_0, stage_1, ... per fed input); the pointer a data loader writes
// input t into (its staging on the GPU, NULL when not held); the uploads of the staged inputs
// after a load (held: per fed input, NULL = all; "" on the CPU), each on a line of its own at
// indent.
const char *kernel_name(E *e, const char *kernel);
void emit_cuda_support(E *e);
const char *cu_in(E *e, const Tensor *t, bool held);
const char *cu_upload_inputs(E *e, const bool *held, const char *indent);
// A table load's destinations (data_io.c): "void *const in_[] = {A, B};" with each fed input's
// pointer (cu_in) where held[k] (NULL = all), else NULL; pr_table_batch and pr_table_val_batch
// take in_.
const char *feed_dsts(E *e, const bool *held);
// The value of the scalar tensor t on the host: "t[0]", or its download on the GPU.
const char *cu_scalar(E *e, const Tensor *t);

// Prints the parameter table P (setup_params) and init_params (params.c), looped over the
// instances of a repeat block where they match.
void emit_params(E *e);

#endif
