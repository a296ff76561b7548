// training.h: the model's `training` section (compiler/training.c, training_data.c): read with
// command-line overrides into a TrainConfig, its data binding, the accuracy node, its dump.
#ifndef PIPEC_TRAINING_H
#define PIPEC_TRAINING_H

#include <stdio.h>

#include "program.h"

// Reads the model's `training` section (defaults where absent) and applies overrides given as
// "key=value" strings (pipec compile --set key=value). Binds the batch symbol to the microbatch.
bool training_parse(const Source *src, Graph *g, const char **overrides, int noverrides,
                    TrainConfig *tc, Diag *d);
// The `training.data` section's inputs (data.input, data.target, data.columns, data.files;
// training_data.c): fills tc->feeds, checks each fed input against the data kind and that every
// other model input is filled by something, and resolves the npy files against dir (the model
// file's directory). Called by training_parse once tc->data and the paths are read.
bool training_data_bind(const Source *src, Graph *g, const cJSON *data, const char *dir,
                        TrainConfig *tc, Diag *d);
// The feed that fills model input t, or NULL (no loader fills t).
const Feed *training_feed_of(const TrainConfig *tc, const Tensor *t);
// Resolves a data path written in the model against dir (absolute, tidied when the file exists).
const char *training_data_path(Arena *a, const char *dir, const char *path);

// After autodiff: decides once, for every S, whether evaluations count correct predictions, and
// of which node (TrainConfig.accuracy): tables only, the one node that reads the target as class
// ids ("classes": cross_entropy) of f32 logits (B, K) it trains (a backward node reads them, so
// they are still there after the forward, on whichever stage computes that node).
void training_accuracy(TrainConfig *tc);
// The logits and the class ids of the accuracy node n (TrainConfig.accuracy).
const Tensor *accuracy_logits(const Node *n);
const Tensor *accuracy_ids(const Node *n);
// Prints the configuration as read (defaults filled in, overrides applied, data paths resolved):
// one "key value" line per training key, in the keys' table order (pipec --dump-after=training).
void training_print(const Graph *g, const TrainConfig *tc, FILE *out);

#endif
