#!/usr/bin/env python3
"""PyTorch's own pipelines training gpt_char or llama_char in two stages on the CPU: the peer of
bench/pipeline.sh.

--model llama_char (before or after the positional arguments; default gpt_char) trains
samples/llama_char.json's model instead (bench/torch_llama.py: torchtitan's Llama with the file's
initialisation), cut where pipec's automatic partitioner cuts it at S = 2: stage 0 =
tok_embeddings, layers.0..1; stage 1 = layers.2..3, norm, output (zbv: 4 stages of one layer
each, as for gpt_char). Its head is untied: nothing crosses the stages but the activations and
their gradients. Each stage module holds the RoPE table (torchtitan's freqs_cis) as a buffer.
The rest (step, schedule, batches, output) is gpt_char's, described below.

The model, step and data are bench/torch_gpt_char.py's (samples/gpt_char.json: 4 layers, 4 heads,
C 128, T 64, V 65, tied head; forward, backward, clip 1.0, AdamW with decay on >= 2-D params), with
samples/gpt_char.json's initialisation (normal 0.02, the residual projections 0.02 / sqrt(2 L),
layernorm weights 1) and its learning-rate schedule (nanoGPT's warmup 100 + cosine to 1e-4 over
2000 steps, as runtime/optim.c), global batch 96 in M = 8 microbatches of 12 rows. The two stages
are pipec's automatic cut of gpt_char at S = 2 (`pipec plan --stages 2`): stage 0 = wte, wpe,
h.0..1; stage 1 = h.2..3, ln_f, the head. The head is tied to wte across the stages: each stage
holds a copy, the two gradients are summed after the backward (so both copies stay equal, as
pipec's exchange does), the gradient norm for clipping is that of the whole model (wte counted
once).

usage: torch_pipeline.py DATA MODE WARMUP STEPS [--model gpt_char|llama_char]
  MODE  one              the reference: one process, the same two stages run one after the other
                         on each of the 8 microbatches, gradients accumulated (as pipec at S = 1)
        pipe             torch.distributed.pipeline.sync.Pipe (PyTorch <= 2.3, e.g. Debian's 1.13):
                         one process, RPC initialised with world size 1, chunks = 8,
                         checkpoint = "never", both partitions on the CPU
        gpipe | 1f1b     torch.distributed.pipelining (PyTorch >= 2.4): 2 processes over gloo,
                         one stage each, ScheduleGPipe / Schedule1F1B with 8 microbatches; the
                         script starts them itself (a file:// rendezvous in a temp dir)
        zbv              the same with ScheduleZBVZeroBubble, PyTorch's zero-bubble schedule
                         (B and W split), which needs 2 stages per rank in a V: 4 stages of one
                         layer each (run_stage says where)
Each process runs torch.set_num_threads(1) and set_num_interop_threads(1); the caller sets
OMP_NUM_THREADS=1 before Python starts (Debian's torch 1.13 links the pthread OpenBLAS).

Prints on stdout the median milliseconds per step over STEPS timed steps after WARMUP, on stderr
one line naming the torch and BLAS and one `loss STEP VALUE` line per step (the losses pipec's
loss log compares with). A step is timed from a barrier of the two processes to the end of the
optimizer step (pipe: from the batch to the end of the optimizer step).
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_gpt_char import B, C, L, T, Block, blas_info  # noqa: E402  (B = 12: one microbatch)
import torch_llama  # noqa: E402  (llama_char's model)

M = 8                # microbatches
GLOBAL = B * M       # rows per step
CUT = 2              # stage 1 starts at transformer.h.2 (pipec's cut)
LR, MIN_LR, WARMUP_LR, DECAY = 1e-3, 1e-4, 100, 2000
MODEL = "gpt_char"   # or llama_char (main() sets it from --model)


def lr_at(it):
    """nanoGPT's get_lr, as runtime/optim.c's pr_lr_at with gpt_char's schedule."""
    if it < WARMUP_LR:
        return LR * (it + 1) / (WARMUP_LR + 1)
    if it > DECAY:
        return MIN_LR
    ratio = (it - WARMUP_LR) / (DECAY - WARMUP_LR)
    return MIN_LR + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (LR - MIN_LR)


def build_blocks(V):
    """The whole model's parameters, initialised as samples/gpt_char.json says, seed 0."""
    torch.manual_seed(0)
    wte = nn.Embedding(V, C)
    wpe = nn.Parameter(torch.empty(T, C))
    blocks = [Block() for _ in range(L)]
    ln_f = nn.Parameter(torch.ones(C))
    nn.init.normal_(wte.weight, std=0.02)
    nn.init.normal_(wpe, std=0.02)
    for blk in blocks:
        for lin, std in ((blk.c_attn, 0.02), (blk.c_proj, 0.02 / math.sqrt(2 * L)),
                         (blk.c_fc, 0.02), (blk.mlp_proj, 0.02 / math.sqrt(2 * L))):
            nn.init.normal_(lin.weight, std=std)
    return wte, wpe, blocks, ln_f


class Stage0(nn.Module):
    """wte, wpe, h.0 .. h.CUT-1: token ids (rows, T) -> activations (rows, T, C)."""

    def __init__(self, wte, wpe, blocks):
        super().__init__()
        self.wte, self.wpe, self.h = wte, wpe, nn.ModuleList(blocks)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe
        for blk in self.h:
            x = blk(x)
        return x


class Stage1(nn.Module):
    """h.CUT .. h.L-1, ln_f, the head (its own copy of wte's weight): -> logits (rows, T, V)."""

    def __init__(self, blocks, ln_f, head):
        super().__init__()
        self.h, self.ln_f, self.head = nn.ModuleList(blocks), ln_f, head

    def forward(self, x):
        for blk in self.h:
            x = blk(x)
        return F.linear(F.layer_norm(x, (C,), self.ln_f), self.head)


class WithFreqs(nn.Module):
    """A llama_char block with its RoPE table: forward(x), as the stages call gpt_char's blocks."""

    def __init__(self, block, freqs_cis):
        super().__init__()
        self.block = block
        self.register_buffer("freqs_cis", freqs_cis.clone(), persistent=False)

    def forward(self, x):
        return self.block(x, self.freqs_cis)


class LlamaStage0(nn.Module):
    """tok_embeddings, layers.0 .. CUT-1: token ids (rows, T) -> activations (rows, T, C)."""

    def __init__(self, tok_embeddings, blocks):
        super().__init__()
        self.tok_embeddings, self.layers = tok_embeddings, nn.ModuleList(blocks)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for blk in self.layers:
            x = blk(x)
        return x


class LlamaStage1(nn.Module):
    """layers.CUT .. L-1, norm, output: -> logits (rows, T, V)."""

    def __init__(self, blocks, norm, output):
        super().__init__()
        self.layers, self.norm, self.output = nn.ModuleList(blocks), norm, output

    def forward(self, x):
        for blk in self.layers:
            x = blk(x)
        return self.output(self.norm(x))


def build_parts(V, one_process=False):
    """MODEL's parameters, initialised as its samples/ file says, seed 0: (first, blocks, last,
    tie) with first(blocks) and last(blocks) the first and last stage's modules around a slice of
    the blocks, and tie (the embedding, the last stage's head) where the head is tied to the
    embedding across the stages (gpt_char: a copy on the last stage, or with one_process the same
    tensor), else None."""
    if MODEL == "llama_char":
        torch.manual_seed(0)
        net = torch_llama.Transformer(**dict(torch_llama.LLAMA, V=V, T=T))
        blocks = [WithFreqs(layer, net.freqs_cis) for layer in net.layers]
        return (lambda bl: LlamaStage0(net.tok_embeddings, bl), blocks,
                lambda bl: LlamaStage1(bl, net.norm, net.output), None)
    wte, wpe, blocks, ln_f = build_blocks(V)
    head = wte.weight if one_process else nn.Parameter(wte.weight.detach().clone())
    return (lambda bl: Stage0(wte, wpe, bl), blocks, lambda bl: Stage1(bl, ln_f, head),
            None if one_process else (wte.weight, head))


def unique(params):
    """Each parameter once (one process: gpt_char's tied head is the embedding's tensor)."""
    seen, out = set(), []
    for p in params:
        if id(p) not in seen:
            seen.add(id(p))
            out.append(p)
    return out


def loss_fn(logits, targets):
    return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def make_optimizer(params):
    return torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                             lr=LR, betas=(0.9, 0.99), eps=1e-8)


def load_data(path):
    raw = open(path, "rb").read()
    vocab = sorted(set(raw))
    lut = {c: i for i, c in enumerate(vocab)}
    return torch.tensor([lut[c] for c in raw[: len(raw) * 9 // 10]], dtype=torch.long), len(vocab)


def batches(data, steps):
    """The same batches on every process: (x, y) of GLOBAL rows per step."""
    g = torch.Generator().manual_seed(1337)
    for _ in range(steps):
        ix = torch.randint(len(data) - T - 1, (GLOBAL,), generator=g)
        yield (torch.stack([data[i:i + T] for i in ix]), torch.stack([data[i + 1:i + 1 + T] for i in ix]))


def clip_and_step(opt, sumsq_local, all_params, it, allreduce=None):
    """Clip to a global norm of 1.0 (torch's clip_grad_norm_ arithmetic) and step AdamW."""
    sumsq = sumsq_local
    if allreduce:
        sumsq = allreduce(sumsq)
    coef = min(1.0, 1.0 / (math.sqrt(float(sumsq)) + 1e-6))
    for p in all_params:
        if p.grad is not None:
            p.grad.mul_(coef)
    for grp in opt.param_groups:
        grp["lr"] = lr_at(it)
    opt.step()


def setup_threads():
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def run_pipe(path, warmup, steps):
    """torch.distributed.pipeline.sync.Pipe: one process; both partitions are on device cpu."""
    import torch.distributed.rpc as rpc
    from torch.distributed.pipeline.sync import Pipe

    setup_threads()
    sys.stderr.write("torch %s | %s | threads %d | %s | Pipe, chunks %d\n"
                     % (torch.__version__, blas_info(), torch.get_num_threads(), MODEL, M))
    data, V = load_data(path)
    first, blocks, last, tie = build_parts(V)
    s0, s1 = first(blocks[:CUT]), last(blocks[CUT:])
    tmp = tempfile.mkdtemp()
    rpc.init_rpc("worker", rank=0, world_size=1,
                 rpc_backend_options=rpc.TensorPipeRpcBackendOptions(init_method="file://%s/rdv" % tmp))
    model = Pipe(nn.Sequential(s0, s1), chunks=M, checkpoint="never")
    params0, params1 = list(s0.parameters()), list(s1.parameters())
    opt = make_optimizer(params0 + params1)
    times = []
    for it, (x, y) in enumerate(batches(data, warmup + steps)):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x).local_value(), y)
        loss.backward()
        if tie:  # the tied weight's two uses
            g = tie[0].grad + tie[1].grad
            tie[0].grad.copy_(g)
            tie[1].grad.copy_(g)
        sumsq = sum(float(p.grad.double().pow(2).sum()) for p in params0 + params1 if not tie or p is not tie[1])
        clip_and_step(opt, sumsq, params0 + params1, it)
        if it >= warmup:
            times.append(time.perf_counter() - t0)
        sys.stderr.write("loss %d %.6f\n" % (it, float(loss)))
    rpc.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)
    times.sort()
    print("%.2f" % (1000 * times[len(times) // 2]))


def run_one(path, warmup, steps):
    """One process, no pipeline: per microbatch stage 0 then stage 1, loss / M, backward."""
    setup_threads()
    sys.stderr.write("torch %s | %s | threads %d | %s | one process, %d microbatches accumulated\n"
                     % (torch.__version__, blas_info(), torch.get_num_threads(), MODEL, M))
    data, V = load_data(path)
    first, blocks, last, _ = build_parts(V, one_process=True)  # gpt_char: the tie is the same tensor
    s0, s1 = first(blocks[:CUT]), last(blocks[CUT:])
    params = unique(list(s0.parameters()) + list(s1.parameters()))
    opt = make_optimizer(params)
    times = []
    for it, (x, y) in enumerate(batches(data, warmup + steps)):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = 0.0
        for m in range(M):
            loss = loss_fn(s1(s0(x[m * B:(m + 1) * B])), y[m * B:(m + 1) * B]) / M
            loss.backward()
            total += float(loss.detach())
        sumsq = sum(float(p.grad.double().pow(2).sum()) for p in params)
        clip_and_step(opt, sumsq, params, it)
        if it >= warmup:
            times.append(time.perf_counter() - t0)
        sys.stderr.write("loss %d %.6f\n" % (it, total))
    times.sort()
    print("%.2f" % (1000 * times[len(times) // 2]))


class Mid(nn.Module):
    """Blocks only (the middle stages of the zbv cut)."""

    def __init__(self, blocks):
        super().__init__()
        self.h = nn.ModuleList(blocks)

    def forward(self, x):
        for blk in self.h:
            x = blk(x)
        return x


def run_stage(path, sched_name, warmup, steps, rank, rdv):
    """One process of torch.distributed.pipelining: rank `rank` of 2. gpipe / 1f1b: stage `rank`
    of pipec's 2-stage cut. zbv: 4 stages of one layer each in a V (rank 0 runs stages 0 and 3:
    wte, wpe, h.0 and h.3, ln_f, the head; rank 1 stages 1 and 2: h.1 and h.2), the layout
    ScheduleZBVZeroBubble needs; each rank holds the same layers' weight as in the 2-stage cut
    but one block each way, and the tied pair is on rank 0."""
    import torch.distributed as dist
    from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe, ScheduleZBVZeroBubble

    setup_threads()
    dist.init_process_group("gloo", init_method="file://" + rdv, rank=rank, world_size=2)
    data, V = load_data(path)
    first, blocks, last, tie = build_parts(V)  # gpt_char: the tied head's copy on the last stage
    act = lambda: torch.zeros(B, T, C)
    if sched_name == "zbv":
        if rank == 0:
            mods = [(0, first(blocks[:1]), torch.zeros(B, T, dtype=torch.long)),
                    (3, last(blocks[3:]), act())]
        else:
            mods = [(1, Mid(blocks[1:2]), act()), (2, Mid(blocks[2:3]), act())]
        nstages = 4
    else:
        mods = [(0, first(blocks[:CUT]), torch.zeros(B, T, dtype=torch.long))] if rank == 0 else \
            [(1, last(blocks[CUT:]), act())]
        nstages = 2
    stages = [PipelineStage(m, i, nstages, torch.device("cpu"), input_args=(ex,)) for i, m, ex in mods]
    # Every rank passes loss_fn: without it a schedule runs no backward on that rank.
    if sched_name == "zbv":
        sched = ScheduleZBVZeroBubble(stages, n_microbatches=M, loss_fn=loss_fn)
    else:
        kind = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}[sched_name]
        sched = kind(stages[0], n_microbatches=M, loss_fn=loss_fn)  # scale_grads (default): mean over M
    params = [p for _, m, _ in mods for p in m.parameters()]
    has_first = any(i == 0 for i, _, _ in mods)
    has_last = any(i == nstages - 1 for i, _, _ in mods)
    opt = make_optimizer(params)
    if rank == 0:
        sys.stderr.write("torch %s | %s | threads %d | %s | pipelining %s, 2 processes (gloo), %d stages\n"
                         % (torch.__version__, blas_info(), torch.get_num_threads(), MODEL, type(sched).__name__,
                            nstages))

    def allreduce(v):
        t = torch.tensor([v], dtype=torch.float64)
        dist.all_reduce(t)
        return float(t[0])

    times = []
    for it, (x, y) in enumerate(batches(data, warmup + steps)):
        dist.barrier()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        losses = []
        args = (x,) if has_first else ()
        kw = {"target": y, "losses": losses} if has_last else {}
        sched.step(*args, **kw)
        # gpt_char's tied weight: both uses' gradients, on both copies (across the ranks, or on rank 0).
        if tie and has_first and has_last:
            g = tie[0].grad + tie[1].grad
            tie[0].grad.copy_(g)
            tie[1].grad.copy_(g)
        elif tie and (has_first or has_last):
            dist.all_reduce(tie[0].grad if has_first else tie[1].grad)
        sumsq = sum(float(p.grad.double().pow(2).sum()) for p in params
                    if p.grad is not None and (not tie or p is not tie[1]))
        clip_and_step(opt, sumsq, params, it, allreduce)
        if it >= warmup:
            times.append(time.perf_counter() - t0)
        if has_last:
            sys.stderr.write("loss %d %.6f\n" % (it, float(sum(x.detach() for x in losses)) / len(losses)))
    times.sort()
    med = 1000 * times[len(times) // 2]
    t = torch.tensor([med], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)  # the slower rank's median
    if rank == 0:
        print("%.2f" % float(t[0]))
    dist.destroy_process_group()


def main():
    global MODEL
    import faulthandler
    faulthandler.dump_traceback_later(900, exit=True)  # a hung stage: its stack, then exit
    argv = sys.argv[1:]
    if "--model" in argv:
        i = argv.index("--model")
        if i + 1 >= len(argv) or argv[i + 1] not in ("gpt_char", "llama_char"):
            sys.exit("torch_pipeline.py: --model wants gpt_char or llama_char")
        MODEL = argv[i + 1]
        del argv[i:i + 2]
    if len(argv) == 7 and argv[4] == "--rank":  # a child of the pipelining launch
        run_stage(argv[0], argv[1], int(argv[2]), int(argv[3]), int(argv[5]), argv[6])
        return
    if len(argv) != 4 or argv[1] not in ("one", "pipe", "gpipe", "1f1b", "zbv"):
        sys.exit("usage: torch_pipeline.py DATA one|pipe|gpipe|1f1b|zbv WARMUP STEPS [--model gpt_char|llama_char]")
    path, mode, warmup, steps = argv[0], argv[1], int(argv[2]), int(argv[3])
    if mode == "one":
        run_one(path, warmup, steps)
        return
    if mode == "pipe":
        try:
            import torch.distributed.pipeline.sync  # noqa: F401
        except ImportError as e:
            sys.exit("torch %s has no torch.distributed.pipeline.sync.Pipe (%s)" % (torch.__version__, e))
        run_pipe(path, warmup, steps)
        return
    try:
        import torch.distributed.pipelining  # noqa: F401
    except ImportError as e:
        sys.exit("torch %s has no torch.distributed.pipelining (%s)" % (torch.__version__, e))
    with tempfile.TemporaryDirectory() as tmp:
        rdv = os.path.join(tmp, "rdv")
        kids = [subprocess.Popen([sys.executable, os.path.abspath(__file__), path, mode, str(warmup),
                                  str(steps), "--rank", str(r), rdv, "--model", MODEL]) for r in range(2)]
        rcs = [k.wait() for k in kids]
    if any(rcs):
        sys.exit("torch_pipeline.py: a stage process failed (exit %s)" % rcs)


if __name__ == "__main__":
    main()
