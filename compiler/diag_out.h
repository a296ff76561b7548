// Machine-readable diagnostics (--diagnostics-format=json|sarif, docs/diagnostics.md): the records
// a Diag kept (ir/diag.h) written to its stream as one JSON document, a JSON array of flat records
// (gcc's -fdiagnostics-format=json is the model) or a SARIF 2.1.0 log for code-review tools.
#ifndef PIPEC_DIAG_OUT_H
#define PIPEC_DIAG_OUT_H

#include "../ir/diag.h"

// Parses a --diagnostics-format value ("text", "json", "sarif"); false for anything else.
bool diag_format_parse(const char *s, DiagFormat *out);

// Writes d's records to d->out as the document of d->format (DIAG_TEXT: nothing) and frees them;
// later messages start a new document. version is pipec's (SARIF's tool.driver.version). The
// model's text (diag_set_source) must still be alive: columns and snippets are read from it.
// False when the document could not be built (out of memory); the messages are then printed as
// text instead.
bool diag_write(Diag *d, const char *version);

// The JSON path a message starts with ("nodes[2]" of `nodes[2] "c": ...`, "training.data.path",
// "blocks[0].nodes[1]" of `blocks[0].nodes[1] (instance 1): ...`, "model" for the top-level
// object), malloc'd, or NULL when the message does not start with one.
char *diag_message_path(const char *msg);

// The suggestion a message ends with (" (did you mean 'relu'?)" gives "did you mean 'relu'?"),
// malloc'd, or NULL.
char *diag_message_hint(const char *msg);

#endif
