#!/usr/bin/env python3
"""Train a LLaMA-3-shaped model from random init with coda's fused ops, and the same run in plain PyTorch.

One process trains each engine in turn from the same initial weights on the same batches:

    coda          the Hugging Face model converted in place by coda.patch (RMSNorm, SwiGLU, RoPE and the
                  LM-head loss fused into the GEMMs around them)
    coda_compile  torch.compile of that coda model, for inductor to fuse the torch elementwise ops of
                  coda's composed backward (coda's ops stay opaque calls: docs/training.md)
    eager         the plain Hugging Face model
    compile       torch.compile of the plain model

and writes under --out: the benchmark JSON train.<config>.json (coda's format: "gpu", "commit",
"date", "records"; one record train.<config>.<engine> per engine with tokens_per_s, peak_mem_gib,
final_loss, steps and the loss curve), a plot of the loss and throughput curves (CSV where matplotlib
is missing), and records/train.<config>.<engine>.json, one per engine, so that engines run by separate
commands (one GPU, then DDP and FSDP2 under torchrun) can be put together with --merge.

    python3 examples/train_llama.py                                       # 1 GPU: all four engines
    torchrun --nproc_per_node 2 examples/train_llama.py --parallel ddp --merge
    torchrun --nproc_per_node 2 examples/train_llama.py --parallel fsdp2 --merge
    python3 examples/train_llama.py --tiny --device cpu --engines eager   # tests the script, no GPU

docs/training.md: the model, the data, the precision, what is timed, the expected times.
"""

import argparse
import datetime
import gc
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path

try:
    import torch
    import torch.distributed as dist
except ImportError:
    sys.exit("train_llama: PyTorch is not installed here (pip install torch)")

# Names without "-": the records of several GPUs append "-ddp2", "-fsdp2", ... and compare() and --merge
# split the name at its first "-".
ENGINES = ("coda", "coda_compile", "eager", "compile")
CODA_ENGINES = ("coda", "coda_compile")  # the engines that run coda.patch's model


# ---- the model and the run ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """The model (LLaMA-3 layout: GQA, SwiGLU, RMSNorm, RoPE, untied LM head) and the batch."""
    name: str
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    layers: int
    seq: int
    batch: int  # sequences per optimizer step, all ranks together (the global batch)

    def config_name(self):
        # One dot-free word, the <config> of the record names: train.<config>.<engine>
        return "%s-l%d-s%d-b%d" % (self.name, self.layers, self.seq, self.batch)

    def flops_per_token(self):
        """Model FLOPs of one training token (forward + backward = 3x forward, no recompute): the GEMMs,
        LM head included, and causal attention (QK^T and PV over seq/2 keys on average)."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        gemm_params = self.layers * (self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate)
        gemm_params += self.hidden * self.vocab
        return 6 * gemm_params + 6 * self.layers * self.seq * q


# 1b: LLaMA-3.2-1B's width (d 2048, FFN 8192, 32 query / 8 KV heads of 64, vocab 128256) at a depth chosen
# with --layers; at 8 layers it is 1.01 B parameters, 0.53 B of them in the embedding and the LM head.
# tiny: the same layout small enough for a CPU, to test the script.
PRESETS = {
    "1b": dict(shape=dict(hidden=2048, intermediate=8192, heads=32, kv_heads=8, head_dim=64, vocab=128256,
                          layers=8, seq=2048, batch=8),
               steps=200, warmup=5, lr=3e-4),
    "tiny": dict(shape=dict(hidden=128, intermediate=512, heads=4, kv_heads=2, head_dim=32, vocab=2048,
                            layers=2, seq=128, batch=4),
                 steps=30, warmup=3, lr=2e-3),
}


def llama_config(transformers, shape):
    """A Hugging Face LlamaConfig of the shape: LLaMA-3's RoPE base 500000 and RMSNorm eps 1e-5,
    PyTorch's scaled_dot_product_attention, no KV cache (training)."""
    return transformers.LlamaConfig(
        vocab_size=shape.vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.kv_heads,
        head_dim=shape.head_dim, hidden_act="silu", max_position_embeddings=max(8192, shape.seq),
        rope_theta=500000.0, rms_norm_eps=1e-5, initializer_range=0.02, tie_word_embeddings=False,
        attention_bias=False, mlp_bias=False, use_cache=False, attn_implementation="sdpa")


# ---- the data -----------------------------------------------------------------------------------------------

class PhraseStream:
    """A seeded synthetic language that a model can learn: a fixed table of phrases (2-16 tokens drawn
    uniformly from the whole vocabulary), and a token stream that is a sequence of phrases drawn
    independently with Zipf(1.1) probabilities. A model first learns the token frequencies, then each
    phrase's continuation: the loss falls from ln(vocab) towards the source's entropy per token,
    H(phrase) / E[phrase length] (`floor`), which nothing can beat. Nothing is downloaded; the same seed
    gives the same stream on every run and every rank."""

    def __init__(self, vocab, seed):
        g = torch.Generator().manual_seed(seed)
        n = max(64, vocab // 32)  # 4008 phrases for LLaMA-3's vocabulary
        self.lengths = torch.randint(2, 17, (n,), generator=g)
        self.offsets = torch.cumsum(self.lengths, 0) - self.lengths
        self.table = torch.randint(0, vocab, (int(self.lengths.sum()),), generator=g)
        p = torch.arange(1, n + 1, dtype=torch.float64) ** -1.1
        self.probs = p / p.sum()
        self.floor = float(-(self.probs * self.probs.log()).sum() / (self.probs * self.lengths).sum())
        self.seed = seed

    def tokens(self, steps, batch, seq):
        """int64 [steps, batch, seq]: every step's global batch, each row a window of the stream."""
        g = torch.Generator().manual_seed(self.seed + 1)
        need = steps * batch * seq
        # Every phrase has >= 2 tokens, so need // 2 + 1 phrases cover the stream.
        ids = torch.multinomial(self.probs, need // 2 + 1, replacement=True, generator=g)
        ends = torch.cumsum(self.lengths[ids], 0)
        t = torch.arange(need)
        j = torch.searchsorted(ends, t, right=True)  # the phrase that stream position t falls in
        within = t - (ends[j] - self.lengths[ids[j]])  # and its place in that phrase
        return self.table[self.offsets[ids[j]] + within].view(steps, batch, seq)


# ---- precision ---------------------------------------------------------------------------------------------
#
# bf16 compute, fp32 master weights and fp32 AdamW state, as LLaMA pretraining does it (torchtitan's FSDP2
# MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32); Megatron-LM's bf16 optimizer). The sharded run
# gets it from FSDP2 itself; the one-GPU and DDP runs from MasterWeightAdamW below, which does the same
# arithmetic, so 1-GPU, DDP and FSDP2 losses are comparable step by step. Not autocast: with fp32
# parameters the Hugging Face model keeps its residual stream and norms in fp32 under autocast (a
# different computation from the sharded run's), and coda's fused operators are bf16 kernels.

class MasterWeightAdamW:
    """AdamW on fp32 copies of a model's parameters while the model itself holds bf16 ones.

    Built from the fp32 model: keeps the fp32 values as the master weights, then turns the model's
    parameters (not its buffers: RoPE's inverse frequencies stay fp32) into bf16. step(): bf16 grads to
    fp32, clip by global norm, AdamW in fp32, master weights rounded back into the bf16 parameters."""

    def __init__(self, model, lr, max_grad_norm, fused):
        self.params = list(model.parameters())
        self.master = [p.detach().clone() for p in self.params]
        for p in self.params:
            p.data = p.data.to(torch.bfloat16)  # what Module.to() does, for the parameters only
        self.optimizer = make_adamw(self.master, lr, fused)
        self.max_grad_norm = max_grad_norm

    def step(self):
        for p, m in zip(self.params, self.master):
            m.grad = p.grad.float()
            p.grad = None
        torch.nn.utils.clip_grad_norm_(self.master, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        with torch.no_grad():
            for p, m in zip(self.params, self.master):
                p.copy_(m)


class PlainAdamW:
    """AdamW on the model's own parameters (the FSDP2 run: fp32 shards, bf16 compute by FSDP2's policy)."""

    def __init__(self, model, lr, max_grad_norm, fused):
        self.params = list(model.parameters())
        self.optimizer = make_adamw(self.params, lr, fused)
        self.max_grad_norm = max_grad_norm

    def step(self):
        torch.nn.utils.clip_grad_norm_(self.params, self.max_grad_norm)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)


def make_adamw(params, lr, fused):
    # LLaMA's AdamW: betas (0.9, 0.95), eps 1e-8, weight decay 0.1 (on every parameter, as torchtitan).
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1, fused=fused)


def lr_schedule(steps):
    """Linear warm-up over the first 10% of the steps, then cosine decay to 10% of the peak."""
    warm = max(1, steps // 10)

    def factor(step):
        if step < warm:
            return (step + 1) / warm
        progress = (step - warm) / max(1, steps - warm)
        return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))
    return factor


# ---- the engines -------------------------------------------------------------------------------------------

@dataclass
class Parallel:
    """Where this process runs: one device, or one rank of a torchrun job (DDP or FSDP2)."""
    kind: str  # "none", "ddp" or "fsdp2"
    rank: int
    world: int
    device: torch.device

    def suffix(self):
        # Record engine names: coda, coda_compile, eager, compile on one GPU; coda-ddp2, eager-fsdp2, ... under
        # torchrun (the number: how many GPUs)
        if self.kind == "none":
            return ""
        return "-%s%d" % ({"ddp": "ddp", "fsdp2": "fsdp"}[self.kind], self.world)


def build(engine, transformers, coda, shape, args, par):
    """The model of one engine, ready to train, and its optimizer. Every engine starts from the same
    weights: the model is built in fp32 from the same seed, then converted."""
    torch.manual_seed(args.seed)
    with par.device:
        model = transformers.LlamaForCausalLM(llama_config(transformers, shape))
    model.train()
    if engine in CODA_ENGINES:
        model = coda.patch(model, rmsnorm=True, swiglu=True, rope=True, lm_head_loss=True)
    cuda = par.device.type == "cuda"  # fused AdamW kernels on the GPU; foreach on the CPU

    if par.kind == "fsdp2":
        # fp32 shards, bf16 compute, fp32 gradient reduction. eager and compile: torchtitan's layout, each
        # decoder layer its own FSDP unit (compiled alone for the compile engine), then the root (embedding,
        # final norm, LM head). coda and coda_compile: the root only, one unit gathered for the whole forward
        # and again for the backward, because the patched forward crosses layers (one fused call takes layer
        # i's MLP and layer i+1's QKV weights) and reads the weights without calling the layer modules, whose
        # hooks are where FSDP2 gathers a unit. coda_compile then compiles the sharded root: FSDP2's hooks
        # run outside the graph (dynamo does not trace them), the forward they gather for inside it.
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mesh = init_device_mesh(par.device.type, (par.world,))
        policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if engine not in CODA_ENGINES:
            layers = model.model.layers
            for i, layer in enumerate(layers):
                if engine == "compile":
                    layers[i] = layer = torch.compile(layer)
                fully_shard(layer, mesh=mesh, mp_policy=policy)
        fully_shard(model, mesh=mesh, mp_policy=policy)
        optimizer = PlainAdamW(model, args.lr, args.max_grad_norm, fused=cuda)
        if engine == "coda_compile":
            model = torch.compile(model)
        return model, optimizer

    optimizer = MasterWeightAdamW(model, args.lr, args.max_grad_norm, fused=cuda)  # model now bf16
    if par.kind == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model, device_ids=[par.device.index] if cuda else None)
    if engine in ("compile", "coda_compile"):
        model = torch.compile(model)  # DDP inside: the DDP optimizer splits the graph at its buckets
    return model, optimizer


def release():
    """Free what the engine that ran last held: its model, optimizer and compiled graphs, and the cached
    blocks, so that the next engine's peak memory is its own."""
    gc.collect()
    torch._dynamo.reset()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


class StepClock:
    """Per-step times without synchronizing inside the loop: CUDA events on the GPU's stream (time
    between the starts of consecutive steps, idle gaps included), the wall clock on the CPU."""

    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.marks = []

    def mark(self):
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self):
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


class Progress:
    """tqdm on a terminal where it is installed; otherwise a line every ~10% of the steps."""

    def __init__(self, total, desc, enabled):
        self.total, self.desc, self.enabled = total, desc, enabled
        self.bar = None
        if enabled and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=total, desc=desc, unit="step", dynamic_ncols=True)
            except ImportError:
                pass
        self.done, self.every, self.t0 = 0, max(1, total // 10), time.perf_counter()

    def update(self, loss):
        self.done += 1
        if not self.enabled:
            return
        if self.bar is not None:
            self.bar.set_postfix(loss="%.4f" % loss, refresh=False)
            self.bar.update(1)
        elif self.done % self.every == 0 or self.done == self.total:
            print("%s: step %d/%d, loss %.4f, %.0f s" % (self.desc, self.done, self.total, loss,
                                                         time.perf_counter() - self.t0), flush=True)

    def close(self):
        if self.bar is not None:
            self.bar.close()


def train(engine, transformers, coda, shape, tokens, args, par):
    """Train one engine for args.steps steps; returns its record (on every rank)."""
    cuda = par.device.type == "cuda"
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    model, optimizer = build(engine, transformers, coda, shape, args, par)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer.optimizer, lr_schedule(args.steps))
    rows = shape.batch // par.world  # this rank's share of the global batch
    local = tokens[:, par.rank * rows:(par.rank + 1) * rows]
    name = engine + par.suffix()
    progress = Progress(args.steps, name, par.rank == 0)
    clock = StepClock(par.device)
    losses = []  # per step, averaged over the ranks; kept on the device, read one step late
    for step in range(args.steps):
        clock.mark()
        ids = local[step]
        loss = model(input_ids=ids, labels=ids).loss  # Hugging Face shifts the labels itself
        loss.backward()
        optimizer.step()
        scheduler.step()
        loss = loss.detach()
        if par.world > 1:
            dist.all_reduce(loss)  # SUM (gloo has no AVG): every rank has the same number of tokens
            loss /= par.world
        losses.append(loss)
        if step > 0:
            # The previous step's loss: step `step` is already queued, so the GPU does not wait.
            progress.update(losses[step - 1].item())
    clock.mark()
    progress.update(losses[-1].item())
    progress.close()

    times = clock.seconds()
    timed = times[args.warmup:]
    step_s = sum(timed) / len(timed)
    tokens_per_step = shape.batch * shape.seq  # all ranks together
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else None
    if peak is not None and par.world > 1:
        peak_t = torch.tensor(peak, device=par.device)
        dist.all_reduce(peak_t, op=dist.ReduceOp.MAX)
        peak = peak_t.item()
    curve = [round(x.item(), 5) for x in losses]

    del model, optimizer, scheduler, losses, loss
    release()
    return {
        "name": "train.%s.%s" % (shape.config_name(), name),
        "engine": name,
        "parallel": par.kind,
        "world_size": par.world,
        "steps": args.steps,
        "timed_steps": len(timed),
        "warmup_s": round(sum(times[:args.warmup]), 3),  # untimed steps, compiling included
        "step_ms": round(step_s * 1e3, 3),
        "tokens_per_s": round(tokens_per_step / step_s, 1),
        "tflops": round(shape.flops_per_token() * tokens_per_step / step_s / par.world / 1e12, 3),  # per GPU
        "peak_mem_gib": None if peak is None else round(peak, 3),
        "final_loss": curve[-1],
        "losses": curve,
        "step_tokens_per_s": [round(tokens_per_step / t, 1) for t in times],
    }


# ---- records, comparisons, plot ------------------------------------------------------------------------------

def repo_commit():
    """The commit as coda bench records it (cmake/commit.cmake, bench/peers.py): $CODA_COMMIT when set
    (a copy of the tree whose .git is not the commit run, like the device machine's copy of a
    checkout), else the checkout's commit (12 hex digits, -dirty with uncommitted changes to tracked
    files), else unknown."""
    if os.environ.get("CODA_COMMIT"):
        return os.environ["CODA_COMMIT"]
    root = Path(__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
                              capture_output=True, text=True, timeout=10)
        if head.returncode == 0 and head.stdout.strip():
            dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                                   capture_output=True, text=True, timeout=10).stdout.strip()
            return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        pass
    return "unknown"


def write_json(path, obj):
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "w") as fh:
        json.dump(obj, fh, indent=1)
        fh.write("\n")
    os.replace(tmp, path)


def loss_diff(rec, ref):
    """How far rec's loss curve is from ref's, over the steps both have (same batches, same start)."""
    a, b = rec["losses"], ref["losses"]
    n = min(len(a), len(b))
    tail = max(1, n // 4)
    return {"loss_ref": ref["name"],
            "loss_mean_abs_diff": round(sum(abs(x - y) for x, y in zip(a[:n], b[:n])) / n, 5),
            "loss_tail_diff": round(sum(x - y for x, y in zip(a[n - tail:n], b[n - tail:n])) / tail, 5)}


def compare(records):
    """Adds, to each record, its speed against eager and compile at the same parallel layout (vs_eager,
    vs_compile: tokens/s ratios) and its loss curve against a reference: eager's for one-GPU
    engines, the same engine on one GPU for DDP/FSDP2 ones, with their scaling efficiency
    (tokens/s over world_size x the one-GPU tokens/s)."""
    by_name = {r["engine"]: r for r in records}
    for r in records:
        base, suffix = r["engine"].partition("-")[::2]
        suffix = "-" + suffix if suffix else ""
        for other in ("eager", "compile"):
            o = by_name.get(other + suffix)
            if o is not None and o is not r:
                r["vs_" + other] = round(r["tokens_per_s"] / o["tokens_per_s"], 4)
        ref = by_name.get(base if suffix else "eager")
        if ref is not None and ref is not r:
            r.update(loss_diff(r, ref))
            if suffix:
                r["scaling_efficiency"] = round(r["tokens_per_s"] / (r["world_size"] * ref["tokens_per_s"]), 4)


def print_summary(records, floor):
    head = "%-18s %6s %10s %8s %9s %9s %10s %22s %8s" % (
        "engine", "steps", "tokens/s", "x eager", "x compile", "peak GiB", "final loss", "mean |dloss| vs", "scaling")
    print("\n" + head)
    print("-" * len(head))

    def f(r, key, fmt):
        v = r.get(key)
        return fmt % v if v is not None else "-"
    for r in records:
        ref = ("%.4f (%s)" % (r["loss_mean_abs_diff"], r["loss_ref"].rsplit(".", 1)[1])
               if "loss_ref" in r else "-")
        print("%-18s %6d %10s %8s %9s %9s %10.4f %22s %8s" % (
            r["engine"], r["steps"], f(r, "tokens_per_s", "%.0f"), f(r, "vs_eager", "%.3f"),
            f(r, "vs_compile", "%.3f"), f(r, "peak_mem_gib", "%.2f"), r["final_loss"], ref,
            f(r, "scaling_efficiency", "%.3f")))
    yardstick = next((r for r in records if r["engine"] == "compile" and "loss_ref" in r), None)
    if yardstick is not None:
        print("bf16 noise yardstick: torch.compile against eager, mean |dloss| %.4f (same model, other rounding)"
              % yardstick["loss_mean_abs_diff"])
    print("source entropy (the lowest loss possible): %.4f" % floor)


def plot(records, floor, title, stem):
    """Loss, loss minus the reference's, and tokens/s per step, one line per engine: <stem>.png, or
    <stem>.csv where matplotlib is missing."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = Path(str(stem) + ".csv")
        steps = max(len(r["losses"]) for r in records)
        cols = [(r["engine"] + " loss", r["losses"]) for r in records]
        cols += [(r["engine"] + " tokens/s", r["step_tokens_per_s"]) for r in records]
        with open(path, "w") as fh:
            fh.write(",".join(["step"] + [c for c, _ in cols]) + "\n")
            for i in range(steps):
                fh.write(",".join([str(i)] + [str(v[i]) if i < len(v) else "" for _, v in cols]) + "\n")
        print("matplotlib is not installed: wrote the curves as CSV, %s" % path)
        return
    by_name = {r["name"]: r for r in records}
    fig, (ax_loss, ax_diff, ax_tps) = plt.subplots(3, 1, figsize=(10, 12), sharex=True)
    for r in records:
        steps = range(len(r["losses"]))
        line, = ax_loss.plot(steps, r["losses"], label=r["engine"], linewidth=1)
        if "loss_ref" in r:
            ref = by_name[r["loss_ref"]]["losses"]
            ax_diff.plot(steps, [a - b for a, b in zip(r["losses"], ref)], color=line.get_color(), linewidth=1,
                         label="%s - %s" % (r["engine"], r["loss_ref"].rsplit(".", 1)[1]))
        warm = r["steps"] - r["timed_steps"]
        ax_tps.plot(steps[warm:], r["step_tokens_per_s"][warm:], color=line.get_color(), linewidth=1,
                    label="%s: %.0f tokens/s" % (r["engine"], r["tokens_per_s"]))
    ax_loss.axhline(floor, color="gray", linestyle=":", label="source entropy %.3f" % floor)
    ax_loss.set_ylabel("training loss (nats/token)")
    ax_loss.set_title(title)
    ax_diff.axhline(0, color="gray", linewidth=0.5)
    ax_diff.set_ylabel("loss - reference loss")
    ax_tps.set_ylabel("tokens/s (timed steps)")
    ax_tps.set_xlabel("step")
    for ax in (ax_loss, ax_diff, ax_tps):
        ax.grid(alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    path = Path(str(stem) + ".png")
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print("plot: %s" % path)


# ---- main ----------------------------------------------------------------------------------------------------

def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Train a LLaMA-3-shaped model with coda, PyTorch eager and torch.compile (docs/training.md)")
    ap.add_argument("--engines", default=",".join(ENGINES),
                    help="comma-separated, run in this order: %s (default: all four)" % ", ".join(ENGINES))
    ap.add_argument("--parallel", choices=("none", "ddp", "fsdp2"), default="none",
                    help="under torchrun: DDP or FSDP2 (fully_shard per decoder layer, then the root)")
    ap.add_argument("--tiny", action="store_true", help="a tiny model, for testing the script (CPU)")
    ap.add_argument("--layers", type=int, help="decoder layers (default 8; tiny 2)")
    ap.add_argument("--seq", type=int, help="sequence length (default 2048; tiny 128)")
    ap.add_argument("--batch", type=int, help="global batch in sequences, all ranks together (default 8; tiny 4)")
    ap.add_argument("--steps", type=int, help="optimizer steps (default 200; tiny 30)")
    ap.add_argument("--warmup", type=int, help="first steps left out of tokens/s: compiling, allocator warm-up "
                                               "(default 5; tiny 3)")
    ap.add_argument("--lr", type=float, help="peak learning rate (default 3e-4; tiny 2e-3)")
    ap.add_argument("--max-grad-norm", type=float, default=1.0, help="gradient clipping (default 1.0)")
    ap.add_argument("--seed", type=int, default=1234, help="seed of the weights and the data (default 1234)")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cuda (default); cpu only with --tiny, to test the script")
    ap.add_argument("--out", type=Path, default=Path("out/train"),
                    help="output folder (default out/train, which git ignores)")
    ap.add_argument("--merge", action="store_true",
                    help="also report the engines recorded under --out by earlier runs of the same configuration")
    args = ap.parse_args(argv)

    preset = PRESETS["tiny" if args.tiny else "1b"]
    shape = dict(preset["shape"])
    for key in ("layers", "seq", "batch"):
        if getattr(args, key) is not None:
            shape[key] = getattr(args, key)
    for key in ("steps", "warmup", "lr"):
        if getattr(args, key) is None:
            setattr(args, key, preset[key])
    args.shape = Shape(name="tiny" if args.tiny else "1b", **shape)
    args.engines = [e.strip() for e in args.engines.split(",") if e.strip()]

    bad = [e for e in args.engines if e not in ENGINES]
    if bad or not args.engines:
        ap.error("--engines: %s; choose from %s" % (", ".join(bad) or "none given", ", ".join(ENGINES)))
    if len(set(args.engines)) != len(args.engines):
        ap.error("--engines: an engine is named twice")
    if args.device == "cpu" and not args.tiny:
        ap.error("--device cpu is only for testing the script: add --tiny")
    if min(shape["layers"], shape["seq"], shape["batch"]) < 1:
        ap.error("--layers, --seq and --batch must be >= 1")
    if args.steps < 2 or not 0 <= args.warmup < args.steps:
        ap.error("need --steps >= 2 and 0 <= --warmup < --steps")
    return args


def init_parallel(args):
    """One process, or one rank of the torchrun job (NCCL on GPUs, gloo on the CPU)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if args.parallel == "none":
        if world > 1:
            sys.exit("train_llama: %d processes: pass --parallel ddp or --parallel fsdp2" % world)
        if args.device == "cuda" and not torch.cuda.is_available():
            sys.exit("train_llama: PyTorch %s sees no CUDA device; to test the script here: --tiny --device cpu"
                     % torch.__version__)
        return Parallel("none", 0, 1, torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu"))
    if world < 2:
        sys.exit("train_llama: --parallel %s runs under torchrun with 2 or more processes, e.g. "
                 "torchrun --nproc_per_node 2 %s ..." % (args.parallel, sys.argv[0]))
    if args.shape.batch % world:
        sys.exit("train_llama: the global batch (--batch %d) must divide among %d ranks" % (args.shape.batch, world))
    rank, local_rank = int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"])
    if args.device == "cuda":
        if torch.cuda.device_count() <= local_rank:
            sys.exit("train_llama: rank %d needs GPU %d; PyTorch sees %d" % (rank, local_rank,
                                                                                torch.cuda.device_count()))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        dist.init_process_group("nccl", device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo")
    return Parallel(args.parallel, rank, world, device)


def import_dependencies(engines):
    try:
        import transformers
    except ImportError:
        sys.exit("train_llama: the model is Hugging Face transformers' LlamaForCausalLM, and transformers is not "
                 "installed here (pip install transformers)")
    wanted = [e for e in engines if e in CODA_ENGINES]
    if not wanted:
        return transformers, None
    try:
        import coda
    except ImportError as e:
        sys.exit("train_llama: engine %s: cannot import coda (%s). Build libcoda.so (./coda test), then "
                 "pip install --no-build-isolation -e . from the repository root, or set PYTHONPATH=python; "
                 "or leave coda out: --engines eager,compile" % (" and ".join(wanted), e))
    if not hasattr(coda, "patch"):
        sys.exit("train_llama: engine %s: this coda (%s, %s) has no coda.patch; leave coda out: "
                 "--engines eager,compile" % (" and ".join(wanted), coda.__version__, os.path.dirname(coda.__file__)))
    return transformers, coda


def main(argv=None):
    args = parse_args(argv)
    transformers, coda = import_dependencies(args.engines)
    par = init_parallel(args)
    shape = args.shape
    lead = par.rank == 0
    if par.device.type == "cuda":
        gpu = torch.cuda.get_device_name(par.device)
    else:
        gpu = "cpu " + (platform.processor() or platform.machine())
    data = PhraseStream(shape.vocab, args.seed)
    config = dict(asdict(shape), steps=args.steps, warmup=args.warmup, lr=args.lr,
                  max_grad_norm=args.max_grad_norm, seed=args.seed, loss_floor=round(data.floor, 5))
    stem = "train." + shape.config_name()
    tokens = data.tokens(args.steps, shape.batch, shape.seq).to(par.device)
    if lead:
        print("train_llama: %s, %d layers, seq %d, global batch %d (%d tokens/step), %d steps (%d untimed); "
              "%s%s, PyTorch %s, transformers %s" % (
                  shape.name, shape.layers, shape.seq, shape.batch, shape.batch * shape.seq, args.steps,
                  args.warmup, gpu, "" if par.world == 1 else " x%d %s" % (par.world, par.kind),
                  torch.__version__, transformers.__version__), flush=True)
        (args.out / "records").mkdir(parents=True, exist_ok=True)

    header = {"gpu": gpu, "commit": repo_commit(),
              "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
              "torch": torch.__version__, "transformers": transformers.__version__,
              "cuda": torch.version.cuda if par.device.type == "cuda" else None, "config": config}
    records, failed = [], []
    for engine in args.engines:
        try:
            rec = train(engine, transformers, coda, shape, tokens, args, par)
        except Exception:
            if par.world > 1:
                raise  # the other ranks wait in a collective: torchrun ends the job
            # One process: report it and go on, so that one engine's failure costs only its own records.
            traceback.print_exc()
            print("train_llama: engine %s failed (above); going on with the others" % engine, flush=True)
            failed.append(engine)
            release()
            continue
        if lead:
            records.append(rec)
            write_json(args.out / "records" / ("%s.%s.json" % (stem, rec["engine"])), dict(header, records=[rec]))
            print("%s: %.0f tokens/s, %.1f ms/step, peak %s GiB, final loss %.4f, %.1f s untimed" % (
                rec["engine"], rec["tokens_per_s"], rec["step_ms"],
                "-" if rec["peak_mem_gib"] is None else "%.2f" % rec["peak_mem_gib"], rec["final_loss"],
                rec["warmup_s"]), flush=True)
    if par.world > 1:
        dist.destroy_process_group()
    if not lead:
        return 0

    if args.merge:
        ours = {r["engine"] for r in records}
        for path in sorted((args.out / "records").glob(stem + ".*.json")):
            with open(path) as fh:
                earlier = json.load(fh)
            rec = earlier["records"][0]
            if rec["engine"] in ours:
                continue
            if earlier.get("config") != config:
                print("merge: %s is from another run configuration; left out" % path)
                continue
            print("merge: %s from %s (commit %s)" % (rec["engine"], earlier["date"], earlier["commit"]))
            rec["merged_from"] = {"date": earlier["date"], "commit": earlier["commit"], "gpu": earlier["gpu"]}
            records.append(rec)
        order = {e: i for i, e in enumerate(ENGINES)}
        records.sort(key=lambda r: (r["world_size"], r["parallel"], order[r["engine"].partition("-")[0]]))
    if not records:
        print("train_llama: no engine finished; nothing to report")
        return 1
    compare(records)
    write_json(args.out / (stem + ".json"), dict(header, records=records))
    print_summary(records, data.floor)
    print("records: %s" % (args.out / (stem + ".json")))
    plot(records, data.floor, "%s: %d layers, seq %d, global batch %d, %s" % (
        shape.name, shape.layers, shape.seq, shape.batch, gpu), args.out / stem)
    if failed:
        print("train_llama: failed: %s" % ", ".join(failed))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
