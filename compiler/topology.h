// --topology FILE.xml: an NCCL topology file (the format of NCCL_TOPO_FILE and
// NCCL_TOPO_DUMP_FILE: <system version="1"> with cpu, pci, gpu, nvlink, nic and net elements)
// read with libxml2, the bandwidth of the path between every two GPUs derived by NCCL's rules,
// and the placement of the pipeline's ranks on the GPUs (compiler/topology.c; docs/pipeline.md,
// "Topology"). A file describes one machine, or several: NCCL's cpu elements carry a host_hash.
#ifndef PIPEC_TOPOLOGY_H
#define PIPEC_TOPOLOGY_H

#include <stdbool.h>
#include <stdio.h>

#include "../ir/arena.h"

typedef struct TopoGpu {
  int dev;           // the gpu element's dev: its device index (CUDA's, in PCI bus order)
  int sm;            // compute capability x 10 (sm="90": Hopper)
  const char *busid; // its pci element's busid
  int line;          // line of its gpu element
  int numa;          // numaid of the cpu element it sits under
  int sys;           // its machine: 0, or the index of its cpu's host_hash among the file's
  double net_bw;     // GB/s to the network: the best NIC's (its net speed and the path to it); 0
} TopoGpu;

typedef struct Topology {
  const char *file;  // the file as named on the command line
  int nsys;          // machines (distinct host_hash values of the cpu elements; 1 without any)
  int ngpu;          // GPUs, by machine, then dev (gpu[i].dev ascending on each machine)
  TopoGpu *gpu;      // the GPUs
  int ncpu;          // cpu elements (NUMA domains)
  int nnic;          // NICs (nic elements)
  int nnvs;          // NVSwitch planes (0 or 1: every nvlink to an NVSwitch reaches the same one)
  double *bw;        // GB/s from GPU i to GPU j at [i * ngpu + j]: the slowest link of the path
                     // NCCL would take (fewest hops, then the fastest); 0 on the diagonal
  const char **kind; // that path's kind at [i * ngpu + j]: "NVL" (NVLink, maybe through an
                     // NVSwitch), "NVB" (NVLink through a GPU), "PIX" (one PCIe switch), "PXB"
                     // (several), "PHB" (through a CPU), "SYS" (between CPUs), "NET" (between
                     // machines: the slower of the two GPUs' best NIC)
} Topology;

// Reads path into t (memory from a). False after printing one line "FILE:LINE: error: MESSAGE"
// (libxml2's message and line for malformed XML; "FILE: error: ..." where no line applies) to
// err: malformed XML, another root than <system version="1">, an unknown element, a missing or
// bad attribute, an unknown PCIe link speed, CPU architecture or vendor, an nvlink to no GPU of
// the file, no GPU, two GPUs of one machine with one dev, two GPUs of one machine that cannot
// reach each other, a GPU without a NIC where there are several machines.
bool topology_load(Topology *t, const char *path, Arena *a, FILE *err);

// GB/s between GPUs i and j for a pipeline's traffic, which goes both ways (activations forward,
// gradients back): the slower of the two directions.
double topology_link(const Topology *t, int i, int j);

// The placement: which GPU (index into t->gpu) runs each of the t->ngpu ranks, into gpu_of_rank.
// It maximises the slowest link between consecutive ranks (ranks r and r + 1, and with cycle
// the last and the first too: interleaved stages wrap around), then minimises the links between
// machines (which share the NICs), then the sum over the links of 1 / bandwidth, and among equal
// ones takes the lexicographically smallest (rank r on GPU r where that is optimal). Exact (a
// dynamic program over subsets) up to 16 GPUs; beyond, greedy from GPU 0 along the fastest link.
// Returns the slowest link's GB/s.
double topology_place(const Topology *t, bool cycle, int *gpu_of_rank, Arena *a);

// The slowest link between consecutive ranks of a placement (cycle: the wrap-around too).
double topology_bottleneck(const Topology *t, bool cycle, const int *gpu_of_rank);

// pipec plan's topology section: the GPUs, the link table (GB/s and path kind), the placement
// and its slowest link against rank r on GPU r's.
void topology_print(const Topology *t, bool cycle, const int *gpu_of_rank, FILE *out);

#endif
