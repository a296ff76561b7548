// topology.c: --topology FILE.xml (topology.h). The file is parsed with libxml2 into a graph of
// nodes (CPUs, PCIe switches, GPUs, NICs, one NVSwitch) and directed links with a bandwidth in
// GB/s, by the rules NCCL applies to the same file (docs/pipeline.md, "Topology"):
// - a pci element links to its parent (cpu or bridge) both ways at link_width x the per-lane
//   rate of link_speed / 8: "2.5 GT/s" 0.1875 GB/s per lane, "5 GT/s" 0.375, "8 GT/s" 0.75,
//   "16 GT/s" 1.5, "32 GT/s" 3, "64 GT/s" 6 (the kernel's forms with and without " PCIe"); width
//   0 counts as 16 and an empty speed as 8 GT/s, as NCCL does where sysfs told nothing;
// - an nvlink of a GPU gives count x the per-link rate of its SM generation (SM60 18, SM70 20,
//   SM80 20, SM86 12, SM90 20.6, SM100 40.1 GB/s) towards its target: another GPU (one way: the
//   target lists its own nvlink back), the NVSwitch (tclass 0x068000, both ways) or the local CPU
//   (0x068001, both ways); a c2c link count x bw / 1000 GB/s to the local CPU, both ways;
// - the CPUs of a machine are linked pairwise at their interconnect's rate: Intel QPI/UPI by model
//   (family 6: from 0xCF 40, from 0x8F 22, from 0x55 10, else 6), AMD 16, Zhaoxin 9 (YongFeng,
//   family 7 model 0x5B) or 6, POWER 32, ARM 6 GB/s; a pcilink between two switches 5000 GB/s;
// - a net's speed (Mbps; <= 0 counts as 10000) / 8000 GB/s is its NIC's network rate; GPUs of
//   different machines (cpu elements with different host_hash) talk at the slower of the two
//   GPUs' network rates (each: its best NIC, the slower of the path to it and the NIC's rate).
// The path between two GPUs is NCCL's: a breadth-first search from the sender with the fewest
// hops, among those the one whose slowest link is fastest, never through a NIC and through a GPU
// only as NCCL's NVB (NVLink into a GPU one hop from the sender and NVLink out to another GPU).
// Its bandwidth is that slowest link. NCCL's later refinements (PCIe switch flattening, the
// Intel P2P overhead its channel search charges) are left out: they do not change a pair's path.
//
// Malformed XML is reported with libxml2's first error and line; everything else with the line
// of the element at fault. Beyond NCCL's own fallbacks above, nothing is guessed: an attribute
// the rules need must be there.
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <libxml/SAX2.h>
#include <libxml/parser.h>
#include <libxml/tree.h>

#include "files.h"
#include "topology.h"

enum { TN_CPU, TN_PCI, TN_GPU, TN_NIC, TN_NVS };     // node kinds
enum { TL_PCI, TL_NVL, TL_SYS, TL_C2C, TL_LOC };     // link kinds
enum { TOPO_EXACT_MAX = 16, TOPO_MAX_NODES = 4096 }; // exact placement; nodes of a file
enum { TOPO_MSG_MAX = 512 }; // an error message's bytes; a longer one is cut and ends in "..."
#define TOPO_CROSS 1e6       // the placement's price of a link between machines (place_exact)

typedef struct TNode {
  int kind;                // TN_*
  int line;                // line of its element
  const char *busid;       // pci busid, lowercase (NULL: CPU, NVS)
  int cpu;                 // the node index of the cpu it sits under
  int sm;                  // TN_GPU: sm
  int dev;                 // TN_GPU: dev
  double net;              // TN_NIC: its fastest net's GB/s
  int numa;                // TN_CPU: numaid
  int sys;                 // its machine: its cpu's host_hash among the file's (0: the first)
  int arch, vendor, model; // TN_CPU: what its interconnect rate depends on (CPU_*)
} TNode;

typedef struct TLink {
  int from, to; // node indices
  double bw;    // GB/s
  int kind;     // TL_*
} TLink;

typedef struct Pending { // an nvlink, c2c or pcilink resolved once every node exists
  xmlNodePtr el;         // the element
  int node;              // the GPU (nvlink, c2c) or switch (pcilink) it belongs to
} Pending;

typedef struct Parse {
  const char *file;   // for messages
  FILE *err;          // where the message goes
  Arena *a;           // memory
  TNode *n;           // nodes
  int nn, capn;       // count, capacity
  TLink *l;           // links
  int nl, capl;       // count, capacity
  Pending *pend;      // deferred links
  int np, capp;       // count, capacity
  int nvs;            // the NVSwitch node (-1: none yet)
  const char **hosts; // the cpu elements' distinct host_hash values (machines), in file order
  int nhosts;         // count
  bool failed;        // an error was printed
} Parse;

enum { CPU_X86 = 1, CPU_ARM, CPU_POWER };              // arch
enum { VENDOR_INTEL = 1, VENDOR_AMD, VENDOR_ZHAOXIN }; // vendor

// A message on one line: libxml2's encoding error adds "\nBytes: 0x..", and a quoted attribute
// may hold any character.
static void one_line(char *s) {
  for (; *s; s++)
    if ((unsigned char)*s < 0x20 || *s == 0x7f) *s = ' ';
}

static bool fail(Parse *p, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool fail(Parse *p, int line, const char *fmt, ...) {
  if (p->failed) return false;
  p->failed = true;
  char msg[TOPO_MSG_MAX];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  one_line(msg);
  const char *more = n >= (int)sizeof msg ? "..." : ""; // a value quoted from the file was long
  if (line > 0)
    fprintf(p->err, "%s:%d: error: %s%s\n", p->file, line, msg, more);
  else
    fprintf(p->err, "%s: error: %s%s\n", p->file, msg, more);
  return false;
}

static int line_of(xmlNodePtr el) {
  long l = xmlGetLineNo(el);
  return l > 0 && l < 1 << 30 ? (int)l : 0;
}

// The attribute's value copied into the arena, NULL when absent.
static const char *get(Parse *p, xmlNodePtr el, const char *name) {
  xmlChar *v = xmlGetProp(el, BAD_CAST name);
  if (!v) return NULL;
  const char *s = arena_strdup(p->a, (const char *)v);
  xmlFree(v);
  return s;
}

static const char *need(Parse *p, xmlNodePtr el, const char *name) {
  const char *s = get(p, el, name);
  if (!s) fail(p, line_of(el), "<%s> has no attribute '%s'", (const char *)el->name, name);
  return s;
}

// An integer attribute (decimal, or hex with 0x, as NCCL's strtol(..., 0) reads it).
static bool need_int(Parse *p, xmlNodePtr el, const char *name, long lo, long hi, int *out) {
  const char *s = need(p, el, name);
  if (!s) return false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (!*s || *end || errno || v < lo || v > hi)
    return fail(p, line_of(el), "<%s %s=\"%s\">: expected an integer from %ld to %ld",
                (const char *)el->name, name, s, lo, hi);
  *out = (int)v;
  return true;
}

static int add_node(Parse *p, int kind, xmlNodePtr el, int cpu) {
  if (p->nn == TOPO_MAX_NODES) {
    fail(p, line_of(el), "more than %d elements: not a topology pipec reads", TOPO_MAX_NODES);
    return -1;
  }
  if (p->nn == p->capn) {
    int cap = p->capn ? 2 * p->capn : 64;
    TNode *n = ARENA_ARRAY(p->a, TNode, cap);
    if (p->nn) memcpy(n, p->n, sizeof *n * (size_t)p->nn);
    p->n = n, p->capn = cap;
  }
  p->n[p->nn] =
      (TNode){.kind = kind, .line = line_of(el), .cpu = cpu, .sys = cpu >= 0 ? p->n[cpu].sys : 0};
  return p->nn++;
}

static void add_link(Parse *p, int from, int to, double bw, int kind) {
  for (int i = 0; i < p->nl; i++) // NCCL adds the bandwidths of parallel links of one kind
    if (p->l[i].from == from && p->l[i].to == to && p->l[i].kind == kind) {
      p->l[i].bw += bw;
      return;
    }
  if (p->nl == p->capl) {
    int cap = p->capl ? 2 * p->capl : 128;
    TLink *l = ARENA_ARRAY(p->a, TLink, cap);
    if (p->nl) memcpy(l, p->l, sizeof *l * (size_t)p->nl);
    p->l = l, p->capl = cap;
  }
  p->l[p->nl++] = (TLink){from, to, bw, kind};
}

static void defer(Parse *p, xmlNodePtr el, int node) {
  if (p->np == p->capp) {
    int cap = p->capp ? 2 * p->capp : 32;
    Pending *q = ARENA_ARRAY(p->a, Pending, cap);
    if (p->np) memcpy(q, p->pend, sizeof *q * (size_t)p->np);
    p->pend = q, p->capp = cap;
  }
  p->pend[p->np++] = (Pending){el, node};
}

static bool is(xmlNodePtr el, const char *name) {
  return el->type == XML_ELEMENT_NODE && strcmp((const char *)el->name, name) == 0;
}

// Lowercase copy (bus ids compare as NCCL's busIdToInt64 reads them: hex digits).
static const char *lower(Arena *a, const char *s) {
  char *c = arena_strdup(a, s);
  for (char *q = c; *q; q++)
    if (*q >= 'A' && *q <= 'F') *q = (char)(*q - 'A' + 'a');
  return c;
}

// The elements a parent may hold; anything else is an error (a typo would otherwise drop a link).
static bool check_children(Parse *p, xmlNodePtr el, const char *const *allowed) {
  for (xmlNodePtr c = el->children; c; c = c->next) {
    if (c->type != XML_ELEMENT_NODE) continue;
    bool ok = false;
    for (int i = 0; allowed[i] && !ok; i++) ok = strcmp((const char *)c->name, allowed[i]) == 0;
    if (!ok) {
      char list[256] = "";
      for (int i = 0; allowed[i]; i++)
        snprintf(list + strlen(list), sizeof list - strlen(list), "%s<%s>", i ? ", " : "",
                 allowed[i]);
      return fail(p, line_of(c), "unknown element <%s> in <%s> (it may hold %s)",
                  (const char *)c->name, (const char *)el->name, list[0] ? list : "nothing");
    }
  }
  return true;
}

// Per-lane rate of a PCIe link_speed in units of 100 Mbps (NCCL's table); -1: unknown.
static int pci_gen(const char *s) {
  static const struct {
    const char *s;
    int v;
  } gens[] = {{"2.5 GT/s", 15},        {"5 GT/s", 30},          {"8 GT/s", 60},
              {"16 GT/s", 120},        {"32 GT/s", 240},        {"64 GT/s", 480},
              {"2.5 GT/s PCIe", 15},   {"5.0 GT/s PCIe", 30},   {"8.0 GT/s PCIe", 60},
              {"16.0 GT/s PCIe", 120}, {"32.0 GT/s PCIe", 240}, {"64.0 GT/s PCIe", 480}};
  if (!*s) return 60; // sysfs had no speed: NCCL assumes PCIe Gen3
  for (size_t i = 0; i < sizeof gens / sizeof gens[0]; i++)
    if (strcmp(s, gens[i].s) == 0) return gens[i].v;
  return -1;
}

// GB/s of one NVLink of a GPU of compute capability sm (NCCL's table by SM generation).
static double nvlink_bw(int sm) {
  return sm >= 100  ? 40.1
         : sm >= 90 ? 20.6
         : sm == 86 ? 12.0
         : sm >= 80 ? 20.0
         : sm >= 70 ? 20.0
         : sm >= 60 ? 18.0
                    : 20.0;
}

static double cpu_bw(const TNode *c) {
  if (c->arch == CPU_POWER) return 32.0;
  if (c->arch == CPU_ARM) return 6.0;
  if (c->vendor == VENDOR_INTEL)
    return c->model == 3 ? 40.0 : c->model == 2 ? 22.0 : c->model == 1 ? 10.0 : 6.0;
  if (c->vendor == VENDOR_AMD) return 16.0;
  return c->model == 1 ? 9.0 : 6.0; // Zhaoxin: YongFeng, else ZPI
}

static bool parse_pci(Parse *p, xmlNodePtr el, int parent, int cpu);

static bool parse_nic(Parse *p, xmlNodePtr el, int nic) {
  static const char *const kids[] = {"net", NULL};
  if (!check_children(p, el, kids)) return false;
  for (xmlNodePtr c = el->children; c; c = c->next) {
    if (!is(c, "net")) continue;
    int mbps;
    if (!need_int(p, c, "speed", -1000000000L, 1000000000L, &mbps)) return false;
    if (mbps <= 0) mbps = 10000; // some NICs report -1: NCCL takes 10 Gbps
    double bw = mbps / 8000.0;
    if (bw > p->n[nic].net) p->n[nic].net = bw;
  }
  return true;
}

static bool parse_gpu(Parse *p, xmlNodePtr el, int node) {
  static const char *const kids[] = {"nvlink", "c2c", NULL};
  if (!check_children(p, el, kids)) return false;
  TNode *g = &p->n[node];
  g->line = line_of(el);
  if (!need_int(p, el, "dev", 0, 1023, &g->dev) || !need_int(p, el, "sm", 10, 1000, &g->sm))
    return false;
  for (xmlNodePtr c = el->children; c; c = c->next)
    if (c->type == XML_ELEMENT_NODE) defer(p, c, node);
  return true;
}

static bool parse_pci(Parse *p, xmlNodePtr el, int parent, int cpu) {
  const char *busid = need(p, el, "busid");
  const char *cls = busid ? need(p, el, "class") : NULL;
  const char *speed = cls ? need(p, el, "link_speed") : NULL;
  int width = 0;
  if (!speed || !need_int(p, el, "link_width", 0, 64, &width)) return false;
  int gen = pci_gen(speed);
  if (gen < 0)
    return fail(p, line_of(el),
                "<pci busid=\"%s\">: unknown link_speed \"%s\" (known: 2.5, 5, 8, 16, 32, 64 GT/s, "
                "written \"16 GT/s\" or \"16.0 GT/s PCIe\")",
                busid, speed);
  static const char *const kids[] = {"pci", "gpu", "nic", "pcilink", NULL};
  if (!check_children(p, el, kids)) return false;
  xmlNodePtr gpu = NULL, nic = NULL;
  int npci = 0;
  for (xmlNodePtr c = el->children; c; c = c->next) {
    if (is(c, "gpu")) {
      if (gpu) return fail(p, line_of(c), "<pci busid=\"%s\"> holds a second <gpu>", busid);
      gpu = c;
    }
    if (is(c, "nic")) nic = c;
    if (is(c, "pci")) npci++;
  }
  if ((gpu || nic) && npci)
    return fail(p, line_of(el),
                "<pci busid=\"%s\"> holds a <%s> and <pci> elements: a device is "
                "no switch",
                busid, gpu ? "gpu" : "nic");
  int kind = gpu ? TN_GPU : nic ? TN_NIC : TN_PCI;
  if (!gpu && !nic && strncmp(cls, "0x03", 4) == 0) return true; // a GPU NCCL did not list
  int node = add_node(p, kind, el, cpu);
  if (node < 0) return false;
  p->n[node].busid = lower(p->a, busid);
  if (width == 0) width = 16; // sysfs had no width: NCCL assumes x16
  double bw = width * gen / 80.0;
  add_link(p, node, parent, bw, TL_PCI);
  add_link(p, parent, node, bw, TL_PCI);
  if (gpu) return parse_gpu(p, gpu, node);
  if (nic) return parse_nic(p, nic, node);
  for (xmlNodePtr c = el->children; c; c = c->next) {
    if (is(c, "pci") && !parse_pci(p, c, node, cpu)) return false;
    if (is(c, "pcilink")) defer(p, c, node);
  }
  return true;
}

static bool parse_cpu(Parse *p, xmlNodePtr el) {
  static const char *const kids[] = {"pci", "nic", NULL};
  if (!check_children(p, el, kids)) return false;
  int numa;
  if (!need_int(p, el, "numaid", -1, 1 << 20, &numa)) return false;
  int c = add_node(p, TN_CPU, el, -1);
  if (c < 0) return false;
  p->n[c].cpu = c;
  p->n[c].numa = numa;
  const char *host = get(p, el, "host_hash"); // NCCL's machine, in a multi-node file
  if (!host) host = "";
  int sys = 0;
  while (sys < p->nhosts && strcmp(p->hosts[sys], host) != 0) sys++;
  if (sys == p->nhosts) {
    const char **h = ARENA_ARRAY(p->a, const char *, p->nhosts + 1);
    if (p->nhosts) memcpy(h, p->hosts, sizeof *h * (size_t)p->nhosts);
    h[p->nhosts++] = host;
    p->hosts = h;
  }
  p->n[c].sys = sys;
  const char *arch = need(p, el, "arch");
  if (!arch) return false;
  TNode *n = &p->n[c];
  n->arch = strcmp(arch, "x86_64") == 0  ? CPU_X86
            : strcmp(arch, "arm64") == 0 ? CPU_ARM
            : strcmp(arch, "ppc64") == 0 ? CPU_POWER
                                         : 0;
  if (!n->arch)
    return fail(p, line_of(el),
                "<cpu arch=\"%s\">: unknown architecture (known: x86_64, arm64, "
                "ppc64)",
                arch);
  if (n->arch == CPU_X86) {
    const char *v = need(p, el, "vendor");
    if (!v) return false;
    n->vendor = strcmp(v, "GenuineIntel") == 0                                     ? VENDOR_INTEL
                : strcmp(v, "AuthenticAMD") == 0                                   ? VENDOR_AMD
                : strcmp(v, "CentaurHauls") == 0 || strcmp(v, "  Shanghai  ") == 0 ? VENDOR_ZHAOXIN
                                                                                   : 0;
    if (!n->vendor)
      return fail(p, line_of(el),
                  "<cpu vendor=\"%s\">: unknown vendor (known: GenuineIntel, "
                  "AuthenticAMD, CentaurHauls)",
                  v);
    if (n->vendor != VENDOR_AMD) {
      int fam, mod;
      if (!need_int(p, el, "familyid", 0, 1 << 16, &fam) ||
          !need_int(p, el, "modelid", 0, 1 << 16, &mod))
        return false;
      n = &p->n[c];
      if (n->vendor == VENDOR_INTEL)
        n->model = fam != 6 ? 0 : mod >= 0xCF ? 3 : mod >= 0x8F ? 2 : mod >= 0x55 ? 1 : 0;
      else
        n->model = fam == 7 && mod == 0x5B;
    }
  }
  for (xmlNodePtr k = el->children; k; k = k->next) {
    if (is(k, "pci") && !parse_pci(p, k, c, c)) return false;
    if (is(k, "nic")) { // a NIC straight on the CPU: NCCL links it at local speed
      int nic = add_node(p, TN_NIC, k, c);
      if (nic < 0) return false;
      add_link(p, nic, c, 5000.0, TL_LOC);
      add_link(p, c, nic, 5000.0, TL_LOC);
      if (!parse_nic(p, k, nic)) return false;
    }
  }
  return true;
}

static int find_busid(const Parse *p, const char *busid, int kind, int sys) {
  for (int i = 0; i < p->nn; i++)
    if (p->n[i].kind == kind && p->n[i].sys == sys && p->n[i].busid &&
        strcmp(p->n[i].busid, busid) == 0)
      return i;
  return -1;
}

// The nvlink, c2c and pcilink elements, once every GPU and switch exists.
static bool resolve(Parse *p) {
  for (int i = 0; i < p->np; i++) {
    xmlNodePtr el = p->pend[i].el;
    int node = p->pend[i].node, line = line_of(el);
    if (is(el, "pcilink")) {
      const char *target = need(p, el, "target");
      if (!target) return false;
      int t = find_busid(p, lower(p->a, target), TN_PCI, p->n[node].sys);
      if (t < 0)
        return fail(p, line, "<pcilink target=\"%s\">: no PCIe switch has that busid", target);
      add_link(p, node, t, 5000.0, TL_LOC);
      continue;
    }
    int count;
    if (!need_int(p, el, "count", 1, 1024, &count)) return false;
    int cpu = p->n[node].cpu;
    if (is(el, "c2c")) {
      int bw;
      if (!need_int(p, el, "bw", 1, 1 << 30, &bw)) return false;
      add_link(p, node, cpu, bw * (double)count / 1000.0, TL_C2C);
      add_link(p, cpu, node, bw * (double)count / 1000.0, TL_C2C);
      continue;
    }
    const char *tclass = need(p, el, "tclass");
    if (!tclass) return false;
    double bw = count * nvlink_bw(p->n[node].sm);
    if (strcmp(tclass, "0x068000") == 0) { // the NVSwitch
      if (p->nvs < 0) {
        p->nvs = add_node(p, TN_NVS, el, -1);
        if (p->nvs < 0) return false;
      }
      add_link(p, node, p->nvs, bw, TL_NVL);
      add_link(p, p->nvs, node, bw, TL_NVL);
    } else if (strcmp(tclass, "0x068001") == 0) { // the CPU (POWER's NVLink)
      add_link(p, node, cpu, bw, TL_NVL);
      add_link(p, cpu, node, bw, TL_NVL);
    } else if (strncmp(tclass, "0x03", 4) == 0) { // another GPU
      const char *target = need(p, el, "target");
      if (!target) return false;
      int t = find_busid(p, lower(p->a, target), TN_GPU, p->n[node].sys);
      if (t < 0)
        return fail(p, line, "<nvlink target=\"%s\">: no GPU of the file has that busid", target);
      if (t == node) return fail(p, line, "<nvlink target=\"%s\">: the GPU's own busid", target);
      add_link(p, node, t, bw, TL_NVL);
    } else
      return fail(
          p, line,
          "<nvlink tclass=\"%s\">: unknown target class (known: 0x0302.. or 0x0300.. a GPU, "
          "0x068000 an NVSwitch, 0x068001 a CPU)",
          tclass);
  }
  return true;
}

// libxml2's first error (the others follow from it).
typedef struct XmlErr {
  int line;      // its line (0: none)
  char msg[512]; // its message, without the line break
  bool set;      // one was recorded
  bool dtd;      // the file has a <!DOCTYPE> (line: its line); parsing stopped there
} XmlErr;

static void on_xml_error(void *ctx, xmlErrorPtr e) {
  XmlErr *x = ctx;
  if (x->set || !e || e->level < XML_ERR_ERROR) return;
  x->set = true;
  x->line = e->line;
  snprintf(x->msg, sizeof x->msg, "%s", e->message ? e->message : "malformed XML");
  size_t n = strlen(x->msg);
  while (n && (x->msg[n - 1] == '\n' || x->msg[n - 1] == ' ')) x->msg[--n] = 0;
}

// The parser stops at a <!DOCTYPE>, before its internal subset is read: entity declarations are
// refused outright, since one large entity referenced many times expands quadratically (libxml2
// bounds only the nested "billion laughs" form), and no NCCL topology has one.
static void on_doctype(void *ctx, const xmlChar *name, const xmlChar *ext, const xmlChar *sys) {
  (void)name, (void)ext, (void)sys;
  xmlParserCtxtPtr c = ctx;
  XmlErr *x = c->_private;
  x->dtd = true;
  x->line = xmlSAX2GetLineNumber(ctx);
  xmlStopParser(c);
}

// The file (f, opened and checked as path) parsed without the network, DTDs or entity
// substitution; NULL on failure (x says why).
static xmlDocPtr read_xml(FILE *f, const char *path, XmlErr *x) {
  xmlParserCtxtPtr c = xmlNewParserCtxt();
  if (!c) return NULL;
  c->_private = x;
  c->sax->internalSubset = on_doctype;
  xmlSetStructuredErrorFunc(x, on_xml_error);
  xmlDocPtr doc = xmlCtxtReadFd(c, fileno(f), path, NULL,
                                XML_PARSE_NONET | XML_PARSE_NOERROR | XML_PARSE_NOWARNING);
  xmlSetStructuredErrorFunc(NULL, NULL);
  xmlFreeParserCtxt(c);
  return doc;
}

// Per GPU node: the breadth-first paths to every node (NCCL's rules, see the top of the file).
// dist: hops (-1: unreached), best: slowest link's GB/s, pred: the link into the node.
static void bfs(const Parse *p, int src, const int *off, const int *adj, int *dist, double *best,
                int *pred, int *q) {
  for (int i = 0; i < p->nn; i++) dist[i] = -1, best[i] = 0, pred[i] = -1;
  dist[src] = 0, best[src] = INFINITY;
  int head = 0, tail = 0;
  q[tail++] = src;
  while (head < tail) {
    int lvl_end = tail;
    for (; head < lvl_end; head++) {
      int u = q[head];
      const TNode *nu = &p->n[u];
      if (u != src && nu->kind == TN_NIC) continue;
      if (u != src && nu->kind == TN_GPU && dist[u] != 1) continue;
      for (int k = off[u]; k < off[u + 1]; k++) {
        const TLink *l = &p->l[adj[k]];
        if (u != src && nu->kind == TN_GPU && (l->kind != TL_NVL || p->n[l->to].kind != TN_GPU))
          continue; // through a GPU only NVLink to NVLink (NVB)
        double c = best[u] < l->bw ? best[u] : l->bw;
        int v = l->to;
        if (dist[v] < 0) {
          dist[v] = dist[u] + 1, best[v] = c, pred[v] = adj[k];
          q[tail++] = v;
        } else if (dist[v] == dist[u] + 1 && c > best[v])
          best[v] = c, pred[v] = adj[k];
      }
    }
  }
}

static const char *path_kind(const Parse *p, int src, int dst, const int *pred) {
  bool all_nvl = true, sys = false, via_cpu = false, via_gpu = false;
  int switches = 0;
  for (int v = dst; v != src;) {
    const TLink *l = &p->l[pred[v]];
    all_nvl &= l->kind == TL_NVL;
    sys |= l->kind == TL_SYS;
    int u = l->from;
    if (u != src) {
      via_cpu |= p->n[u].kind == TN_CPU;
      via_gpu |= p->n[u].kind == TN_GPU;
      switches += p->n[u].kind == TN_PCI;
    }
    v = u;
  }
  return via_gpu        ? "NVB"
         : all_nvl      ? "NVL"
         : sys          ? "SYS"
         : via_cpu      ? "PHB"
         : switches > 1 ? "PXB"
                        : "PIX";
}

bool topology_load(Topology *t, const char *path, Arena *a, FILE *err) {
  *t = (Topology){.file = path};
  Parse p = {.file = path, .err = err, .a = a, .nvs = -1};
  const char *kind;
  FILE *f = open_regular(path, &kind); // libxml2 reads the descriptor checked here
  if (!f && kind) return fail(&p, 0, "the topology file is %s, not a regular file", kind);
  if (!f) return fail(&p, 0, "cannot read the topology file: %s", strerror(errno));
  XmlErr xe = {0};
  xmlDocPtr doc = read_xml(f, path, &xe);
  fclose(f);
  if (xe.dtd) {
    if (doc) xmlFreeDoc(doc);
    return fail(&p, xe.line,
                "a <!DOCTYPE> declaration: an NCCL topology file has none, and pipec expands no "
                "entities");
  }
  if (!doc || xe.set) {
    if (doc) xmlFreeDoc(doc);
    return fail(&p, xe.line, "malformed XML: %s", xe.set ? xe.msg : "libxml2 could not read it");
  }
  bool ok = false;
  xmlNodePtr root = xmlDocGetRootElement(doc);
  if (!root || !is(root, "system")) {
    fail(&p, root ? line_of(root) : 0,
         "the root element is <%s>, not <system>: not an NCCL topology file (NCCL_TOPO_DUMP_FILE "
         "writes one)",
         root ? (const char *)root->name : "");
    goto out;
  }
  const char *version = need(&p, root, "version");
  if (!version) goto out;
  if (strcmp(version, "1") != 0) {
    fail(&p, line_of(root), "<system version=\"%s\">: pipec reads version 1", version);
    goto out;
  }
  static const char *const kids[] = {"cpu", NULL};
  if (!check_children(&p, root, kids)) goto out;
  for (xmlNodePtr c = root->children; c; c = c->next)
    if (is(c, "cpu") && !parse_cpu(&p, c)) goto out;
  if (!resolve(&p)) goto out;
  // The CPUs pairwise at their interconnect's rate.
  for (int i = 0; i < p.nn; i++)
    for (int j = 0; j < p.nn; j++)
      if (i != j && p.n[i].kind == TN_CPU && p.n[j].kind == TN_CPU && p.n[i].sys == p.n[j].sys)
        add_link(&p, i, j, cpu_bw(&p.n[i]), TL_SYS);
  // The GPUs, in dev order.
  int ng = 0, ncpu = 0, nnic = 0;
  for (int i = 0; i < p.nn; i++) {
    ng += p.n[i].kind == TN_GPU, ncpu += p.n[i].kind == TN_CPU, nnic += p.n[i].kind == TN_NIC;
  }
  if (ng == 0) {
    fail(&p, line_of(root), "the topology has no <gpu>");
    goto out;
  }
  t->ngpu = ng, t->ncpu = ncpu, t->nnic = nnic, t->nnvs = p.nvs >= 0;
  t->gpu = ARENA_ARRAY(a, TopoGpu, ng);
  int *node_of = ARENA_ARRAY(a, int, ng); // per GPU (machine, then dev order): its node
  for (int i = 0, k = 0; i < p.nn; i++) {
    if (p.n[i].kind != TN_GPU) continue;
    int j = k++; // insertion by machine and dev
    while (j > 0 &&
           (p.n[node_of[j - 1]].sys > p.n[i].sys ||
            (p.n[node_of[j - 1]].sys == p.n[i].sys && p.n[node_of[j - 1]].dev > p.n[i].dev)))
      node_of[j] = node_of[j - 1], j--;
    node_of[j] = i;
  }
  for (int i = 0; i < ng; i++) {
    const TNode *x = &p.n[node_of[i]];
    t->gpu[i] = (TopoGpu){.dev = x->dev,
                          .sm = x->sm,
                          .busid = x->busid,
                          .line = x->line,
                          .numa = p.n[x->cpu].numa,
                          .sys = x->sys};
    if (i && t->gpu[i].dev == t->gpu[i - 1].dev && t->gpu[i].sys == t->gpu[i - 1].sys) {
      const TopoGpu *y = &t->gpu[i - 1], *z = &t->gpu[i];
      fail(&p, y->line > z->line ? y->line : z->line,
           "<gpu dev=\"%d\">: a second GPU with that dev (line %d)", z->dev,
           y->line > z->line ? z->line : y->line);
      goto out;
    }
  }
  // Adjacency (CSR over the links' senders) and the searches.
  int *off = ARENA_ARRAY(a, int, p.nn + 1), *adj = ARENA_ARRAY(a, int, p.nl + 1);
  for (int i = 0; i < p.nl; i++) off[p.l[i].from + 1]++;
  for (int i = 0; i < p.nn; i++) off[i + 1] += off[i];
  int *fill = ARENA_ARRAY(a, int, p.nn + 1);
  for (int i = 0; i < p.nl; i++) adj[off[p.l[i].from] + fill[p.l[i].from]++] = i;
  int *dist = ARENA_ARRAY(a, int, p.nn), *pred = ARENA_ARRAY(a, int, p.nn),
      *q = ARENA_ARRAY(a, int, p.nn);
  double *best = ARENA_ARRAY(a, double, p.nn);
  t->bw = ARENA_ARRAY(a, double, (size_t)ng *ng);
  t->kind = ARENA_ARRAY(a, const char *, (size_t)ng *ng);
  for (int i = 0; i < ng; i++) {
    bfs(&p, node_of[i], off, adj, dist, best, pred, q);
    for (int j = 0; j < ng; j++) {
      if (j == i) continue;
      int dst = node_of[j];
      if (dist[dst] < 0) { // another machine (below), or an error
        if (p.n[dst].sys != p.n[node_of[i]].sys) continue;
        fail(&p, t->gpu[i].line, "GPU dev %d cannot reach GPU dev %d (line %d): no path of links",
             t->gpu[i].dev, t->gpu[j].dev, t->gpu[j].line);
        goto out;
      }
      t->bw[(size_t)i * ng + j] = best[dst];
      t->kind[(size_t)i * ng + j] = path_kind(&p, node_of[i], dst, pred);
    }
    for (int k = 0; k < p.nn; k++)
      if (p.n[k].kind == TN_NIC && dist[k] >= 0) {
        double b = best[k] < p.n[k].net ? best[k] : p.n[k].net;
        if (b > t->gpu[i].net_bw) t->gpu[i].net_bw = b;
      }
  }
  // GPUs of different machines talk over the network: each side's best NIC, the slower one.
  for (int i = 0; i < ng; i++)
    for (int j = 0; j < ng; j++) {
      if (j == i || p.n[node_of[i]].sys == p.n[node_of[j]].sys) continue;
      const TopoGpu *x = &t->gpu[i], *y = &t->gpu[j];
      if (x->net_bw <= 0 || y->net_bw <= 0) {
        const TopoGpu *z = x->net_bw <= 0 ? x : y;
        fail(&p, z->line,
             "GPU dev %d reaches no <net>, but GPUs of another machine (host_hash) "
             "are in the file",
             z->dev);
        goto out;
      }
      t->bw[(size_t)i * ng + j] = x->net_bw < y->net_bw ? x->net_bw : y->net_bw;
      t->kind[(size_t)i * ng + j] = "NET";
    }
  t->nsys = p.nhosts;
  ok = true;
out:
  xmlFreeDoc(doc);
  return ok;
}

double topology_link(const Topology *t, int i, int j) {
  double x = t->bw[(size_t)i * t->ngpu + j], y = t->bw[(size_t)j * t->ngpu + i];
  return x < y ? x : y;
}

double topology_bottleneck(const Topology *t, bool cycle, const int *g) {
  int n = t->ngpu;
  double b = INFINITY;
  for (int r = 0; r + 1 < n || (cycle && n > 2 && r < n); r++) {
    double w = topology_link(t, g[r], g[(r + 1) % n]);
    if (w < b) b = w;
  }
  return b;
}

// The subset dynamic program: h[mask * n + v] is the best completion from GPU v (the last
// placed) when the GPUs in mask are placed. Phase 0 maximises the slowest link, phase 1
// minimises, over links at least as fast as phase 0's optimum, first the links between machines
// (each counts TOPO_CROSS, far above any sum of inverse bandwidths) and then the sum of
// 1 / bandwidth. A completion is recomputed by the same expression when the placement is read
// back, so the equality tests there are exact.
static void place_exact(const Topology *t, bool cycle, int *g, Arena *a) {
  int n = t->ngpu;
  size_t full = ((size_t)1 << n) - 1;
  double *w = ARENA_ARRAY(a, double, (size_t)n *n);
  for (int i = 0; i < n; i++)
    for (int j = 0; j < n; j++) w[i * n + j] = i == j ? 0 : topology_link(t, i, j);
  double *h = ARENA_ARRAY(a, double, (full + 1) * (size_t)n);
  double limit = 0; // phase 1: the slowest link allowed
  for (int phase = 0; phase < 2; phase++) {
    // The value of the link v -> u in this phase, and how values combine along a path.
#define LINKV(v, u)                                                                                \
  (phase == 0 ? w[(v)*n + (u)]                                                                     \
   : w[(v)*n + (u)] >= limit                                                                       \
       ? (t->gpu[v].sys != t->gpu[u].sys ? TOPO_CROSS : 0) + 1.0 / w[(v)*n + (u)]                  \
       : INFINITY)
#define COMB(x, y)   (phase == 0 ? ((x) < (y) ? (x) : (y)) : (x) + (y))
#define BETTER(x, y) (phase == 0 ? (x) > (y) : (x) < (y))
    double worst = phase == 0 ? -INFINITY : INFINITY;
    for (size_t m = full + 1; m-- > 0;) {
      for (int v = 0; v < n; v++) {
        if (!(m >> v & 1)) continue;
        double *hv = &h[m * (size_t)n + v];
        if (m == full) {
          *hv = cycle && n > 2 ? LINKV(v, 0) : phase == 0 ? INFINITY : 0;
          continue;
        }
        double b = worst;
        for (int u = 0; u < n; u++) {
          if (m >> u & 1) continue;
          double c = COMB(LINKV(v, u), h[(m | (size_t)1 << u) * (size_t)n + u]);
          if (BETTER(c, b)) b = c;
        }
        *hv = b;
      }
    }
    // The start: GPU 0 for a cycle (every rotation is as good), else the best first GPU.
    double opt = worst;
    for (int v = 0; v < (cycle && n > 2 ? 1 : n); v++) {
      double c = h[((size_t)1 << v) * (size_t)n + v];
      if (BETTER(c, opt)) opt = c;
    }
    if (phase == 0) {
      limit = opt;
      continue;
    }
    int v = 0;
    while (h[((size_t)1 << v) * (size_t)n + v] != opt) v++;
    size_t m = (size_t)1 << v;
    g[0] = v;
    for (int r = 1; r < n; r++) {
      double want = h[m * (size_t)n + v];
      int u = 0;
      for (; u < n; u++)
        if (!(m >> u & 1) && COMB(LINKV(v, u), h[(m | (size_t)1 << u) * (size_t)n + u]) == want)
          break;
      g[r] = u, v = u, m |= (size_t)1 << u;
    }
#undef LINKV
#undef COMB
#undef BETTER
  }
}

double topology_place(const Topology *t, bool cycle, int *g, Arena *a) {
  int n = t->ngpu;
  if (n <= TOPO_EXACT_MAX) {
    Arena scratch;
    arena_init(&scratch);
    place_exact(t, cycle, g, &scratch);
    arena_free(&scratch);
  } else { // greedy: from GPU 0 along the fastest link to a GPU not placed yet
    bool *used = ARENA_ARRAY(a, bool, n);
    g[0] = 0, used[0] = true;
    for (int r = 1; r < n; r++) {
      int best = -1;
      for (int u = 0; u < n; u++)
        if (!used[u] &&
            (best < 0 || topology_link(t, g[r - 1], u) > topology_link(t, g[r - 1], best)))
          best = u;
      g[r] = best, used[best] = true;
    }
  }
  return topology_bottleneck(t, cycle, g);
}

// "3", or "1/3" (machine 1's GPU 3) when the file has several machines.
static const char *gpu_name(const Topology *t, int i, char *buf, size_t cap) {
  if (t->nsys > 1)
    snprintf(buf, cap, "%d/%d", t->gpu[i].sys, t->gpu[i].dev);
  else
    snprintf(buf, cap, "%d", t->gpu[i].dev);
  return buf;
}

void topology_print(const Topology *t, bool cycle, const int *g, FILE *out) {
  int n = t->ngpu;
  char b1[32];
  fprintf(out, "topology %s: %d GPU%s, %d CPU%s, %d NIC%s%s", t->file, n, n == 1 ? "" : "s",
          t->ncpu, t->ncpu == 1 ? "" : "s", t->nnic, t->nnic == 1 ? "" : "s",
          t->nnvs ? ", an NVSwitch" : "");
  if (t->nsys > 1) fprintf(out, " on %d machines (GPU M/D: machine M's dev D)", t->nsys);
  fprintf(out, " (GB/s by NCCL's rules)\n");
  fprintf(out, "  gpu  busid          sm  numa    net");
  for (int j = 0; j < n; j++) {
    char h[48];
    snprintf(h, sizeof h, "to dev %s", gpu_name(t, j, b1, sizeof b1));
    fprintf(out, "  %11s", h);
  }
  fputc('\n', out);
  for (int i = 0; i < n; i++) {
    const TopoGpu *x = &t->gpu[i];
    fprintf(out, "  %3s  %-13s %3d  %4d %6.2f", gpu_name(t, i, b1, sizeof b1), x->busid, x->sm,
            x->numa, x->net_bw);
    for (int j = 0; j < n; j++)
      if (j == i)
        fprintf(out, "  %11s", "-");
      else
        fprintf(out, "  %7.2f %s", t->bw[(size_t)i * n + j], t->kind[(size_t)i * n + j]);
    fputc('\n', out);
  }
  fprintf(out, "placement:");
  for (int r = 0; r < n; r++)
    fprintf(out, " rank %d on GPU %s%s", r, gpu_name(t, g[r], b1, sizeof b1), r + 1 < n ? "," : "");
  int *id = malloc(sizeof(int) * (size_t)n);
  for (int r = 0; r < n && id; r++) id[r] = r;
  fprintf(out,
          "\n  slowest link between consecutive ranks%s: %.2f GB/s (rank r on GPU r: %.2f GB/s)\n",
          cycle ? " (and the last to the first)" : "", topology_bottleneck(t, cycle, g),
          id ? topology_bottleneck(t, cycle, id) : 0.0);
  free(id);
}
