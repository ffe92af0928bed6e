"""coda.nn: LLaMA modules with Hugging Face transformers' names, and coda.patch.

    import coda
    coda.patch(model)          # a transformers LlamaForCausalLM, or a coda.nn.LlamaForCausalLM
    loss = model(input_ids=ids, labels=ids).loss

The modules carry Hugging Face's names (model.embed_tokens, model.layers[i].self_attn.{q,k,v,o}_proj,
.mlp.{gate,up,down}_proj, .input_layernorm, .post_attention_layernorm, model.norm, lm_head) and,
unpatched, compute what transformers' LLaMA computes, in plain torch. coda.patch then runs the
model as coda's schedule (coda-math.md 6): every RMSNorm is split between the GEMM that produces
its input (residual_rmsnorm) and the GEMM that consumes it; SwiGLU and RoPE run in the epilogues of
the gate/up and QKV GEMMs; the LM head and cross-entropy keep one [M, V] tensor. Attention stays
torch's scaled_dot_product_attention (causal). Between two layers the fused block llama3_block
runs (it saves less for backward than the separate operators).

Weights: patch fuses q/k/v into self_attn.qkv_proj (q and k rows permuted to coda's interleaved
RoPE pairs) and gate/up into mlp.gate_up_proj (rows interleaved), once, in place; state_dict() and
load_state_dict() still use Hugging Face's names and layouts (hooks convert), so checkpoints stay
interchangeable. Build the optimizer after patching (the fused weights are new Parameters; the
others are kept). hf_named() maps any {name: tensor} of a patched model (e.g. its gradients) back
to Hugging Face's names and layouts.
"""

import dataclasses
import math
import types
from typing import Optional

import torch
from torch import nn
from torch.nn import functional as F

from . import functional as CF
from . import ops
from ._lib import IGNORE_INDEX

__all__ = [
    "LlamaConfig",
    "LlamaRMSNorm",
    "LlamaAttention",
    "LlamaMLP",
    "LlamaDecoderLayer",
    "LlamaModel",
    "LlamaForCausalLM",
    "Fusion",
    "patch",
    "hf_named",
]


@dataclasses.dataclass
class LlamaConfig:
    """The fields of transformers' LlamaConfig that coda.nn uses (same names). rope_scaling: None or
    Llama-3.1's {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"}."""

    vocab_size: int = 128256
    hidden_size: int = 4096
    intermediate_size: int = 14336
    num_hidden_layers: int = 32
    num_attention_heads: int = 32
    num_key_value_heads: int = 8
    head_dim: Optional[int] = None
    rms_norm_eps: float = 1e-5
    rope_theta: float = 500000.0
    rope_scaling: Optional[dict] = None
    tie_word_embeddings: bool = False

    def __post_init__(self):
        if self.head_dim is None:
            self.head_dim = self.hidden_size // self.num_attention_heads


@dataclasses.dataclass(frozen=True)
class Fusion:
    """Which of coda's fused operators a patched model runs (coda.patch's flags); all False is the
    plain torch computation of an unpatched coda.nn model."""

    rmsnorm: bool = False
    swiglu: bool = False
    rope: bool = False
    lm_head_loss: bool = False


@dataclasses.dataclass
class BaseModelOutput:
    """LlamaModel's output (transformers' BaseModelOutputWithPast for a patched transformers model)."""

    last_hidden_state: torch.Tensor


@dataclasses.dataclass
class CausalLMOutput:
    """LlamaForCausalLM's output (transformers' CausalLMOutputWithPast for a patched transformers
    model). With the fused loss (lm_head_loss and labels) logits is None: they are never kept."""

    loss: Optional[torch.Tensor]
    logits: Optional[torch.Tensor]


# ---- the RMSNorm as a pair (h, rstd) ------------------------------------------------------------------------

class _Normed:
    """RMSNorm(x) as (h, r): with r, RMSNorm(x) = r * h (h = x * w, coda's split); r None: h is it."""

    def __init__(self, h, r=None):
        self.h, self.r = h, r

    def value(self):
        """RMSNorm(x) itself, for a torch consumer."""
        if self.r is None:
            return self.h
        return (self.h.float() * self.r[:, None]).to(self.h.dtype)


def _first_norm(x, norm, fusion):
    if fusion.rmsnorm:
        return _Normed(*CF.rmsnorm_split(x, norm.weight, norm.variance_epsilon))
    return _Normed(norm(x))


def _residual_norm(y, linear, residual, norm, fusion):
    """x = y W^T + residual and the next norm of x: coda's residual_rmsnorm, or torch. norm None:
    only x (a layer run on its own)."""
    if fusion.rmsnorm and norm is not None:
        x, h, r = CF.residual_rmsnorm(y, linear.weight, norm.weight, residual, norm.variance_epsilon)
        return x, _Normed(h, r)
    x = residual + linear(y)
    return x, (None if norm is None else _Normed(norm(x)))


def _tail(layer, y, x, next_norm, fusion):
    """A decoder layer after attention: x + o_proj(y), the MLP, its residual add and next_norm (the
    next layer's input norm or the final norm; None: skipped). Returns (x, normed)."""
    x, n = _residual_norm(y, layer.self_attn.o_proj, x, layer.post_attention_layernorm, fusion)
    return _residual_norm(layer.mlp.act(n), layer.mlp.down_proj, x, next_norm, fusion)


# ---- modules ------------------------------------------------------------------------------------------------

class LlamaRMSNorm(nn.Module):
    """transformers' LlamaRMSNorm: weight * (x / sqrt(mean x^2 + eps)), the statistics in fp32."""

    def __init__(self, hidden_size, eps=1e-5):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, x):
        xf = x.float()
        return self.weight * (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.variance_epsilon)).to(x.dtype)


def _rope_rotate_half(t, positions, freqs, head_dim):
    """Hugging Face's rotate-half RoPE on t [M, heads * head_dim] (pairs (i, i + head_dim / 2))."""
    m = t.shape[0]
    turns = positions.double()[:, None] * freqs.double()[None, :]
    theta = 2 * math.pi * (turns - torch.floor(turns))
    cos, sin = torch.cos(theta).repeat(1, 2).to(t.dtype), torch.sin(theta).repeat(1, 2).to(t.dtype)
    x = t.view(m, -1, head_dim)
    half = head_dim // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return (x * cos[:, None, :] + rotated * sin[:, None, :]).reshape(m, -1)


def _rotate_half_rows(heads, device):
    """Row order of coda's interleaved layout: out row 2i of a q/k head is row i, 2i + 1 is row
    i + hd / 2 (coda.permute_rotate_half_to_interleaved); v rows unchanged."""
    hq, hkv, hd = heads
    i = torch.arange(hd // 2, device=device)
    head = torch.stack((i, i + hd // 2), dim=1).reshape(hd)
    qk = (torch.arange(hq + hkv, device=device)[:, None] * hd + head[None, :]).reshape(-1)
    return torch.cat((qk, torch.arange((hq + hkv) * hd, (hq + 2 * hkv) * hd, device=device)))


class _Fusable(nn.Module):
    """A module whose separate Hugging Face projections fuse into one coda weight. Subclasses name
    the fused Linear (FUSED), the Hugging Face ones (PARTS) and give _join(parts) -> fused weight,
    _split(fused) -> parts. state_dict() and load_state_dict() keep Hugging Face's names."""

    FUSED = ""
    PARTS = ()

    @property
    def fused(self):
        return hasattr(self, self.FUSED)

    def fuse_(self):
        """Replace the PARTS Linears by the FUSED one (new Parameter, same dtype and device)."""
        if self.fused:
            return
        parts = [getattr(self, p) for p in self.PARTS]
        with torch.no_grad():
            w = self._join([p.weight for p in parts])
        linear = nn.Linear(w.shape[1], w.shape[0], bias=False, device="meta")
        linear.weight = nn.Parameter(w, requires_grad=parts[0].weight.requires_grad)
        for p in self.PARTS:
            delattr(self, p)
        setattr(self, self.FUSED, linear)
        # (torch < 2.5 has only the private name of the state_dict post hook)
        getattr(self, "register_state_dict_post_hook", self._register_state_dict_hook)(_state_dict_to_hf)
        self.register_load_state_dict_pre_hook(_state_dict_from_hf)

    def to_hf(self, tensors, prefix=""):
        """Replace prefix + FUSED.weight in the dict by the Hugging Face weights."""
        key = f"{prefix}{self.FUSED}.weight"
        if self.fused and key in tensors:
            for name, t in zip(self.PARTS, self._split(tensors.pop(key))):
                tensors[f"{prefix}{name}.weight"] = t


def _state_dict_to_hf(module, state_dict, prefix, local_metadata):
    with torch.no_grad():
        module.to_hf(state_dict, prefix)


def _state_dict_from_hf(module, state_dict, prefix, *args):
    keys = [f"{prefix}{p}.weight" for p in module.PARTS]
    if all(k in state_dict for k in keys):
        with torch.no_grad():
            state_dict[f"{prefix}{module.FUSED}.weight"] = module._join([state_dict.pop(k) for k in keys])


class LlamaAttention(_Fusable):
    """q_proj, k_proj, v_proj, o_proj (no bias) and causal scaled_dot_product_attention with grouped
    kv heads; patched (rope): qkv_proj [(hq + 2 hkv) hd, d] with q/k rows in interleaved-pair order,
    RMSNorm scale and RoPE in its GEMM epilogue (coda.rmsnorm_qkv_rope)."""

    FUSED, PARTS = "qkv_proj", ("q_proj", "k_proj", "v_proj")

    def __init__(self, hidden_size, num_heads, num_kv_heads, head_dim, *, projections=None):
        super().__init__()
        self.heads = (num_heads, num_kv_heads, head_dim)
        q, kv = num_heads * head_dim, num_kv_heads * head_dim
        self.q_proj, self.k_proj, self.v_proj, self.o_proj = projections or (
            nn.Linear(hidden_size, q, bias=False), nn.Linear(hidden_size, kv, bias=False),
            nn.Linear(hidden_size, kv, bias=False), nn.Linear(q, hidden_size, bias=False))

    def _join(self, parts):
        return torch.cat(parts)[_rotate_half_rows(self.heads, parts[0].device)]

    def _split(self, w):
        rows = _rotate_half_rows(self.heads, w.device)
        hf = torch.empty_like(w)
        hf[rows] = w
        hq, hkv, hd = self.heads
        return hf.split((hq * hd, hkv * hd, hkv * hd))

    def qkv(self, n, positions, freqs):
        """(q, k, v) [M, heads * head_dim] from the normed input."""
        hq, hkv, hd = self.heads
        if self.fused:
            qkv = CF.rmsnorm_qkv_rope(n.h, self.qkv_proj.weight, n.r, positions, freqs, self.heads)
            return qkv.split((hq * hd, hkv * hd, hkv * hd), dim=1)
        y = n.value()
        return (_rope_rotate_half(self.q_proj(y), positions, freqs, hd),
                _rope_rotate_half(self.k_proj(y), positions, freqs, hd), self.v_proj(y))

    def attend(self, q, k, v, batch):
        """Causal attention per sequence of the batch; [M, hq * hd]."""
        hq, hkv, hd = self.heads

        def heads(t):
            return t.reshape(batch, -1, t.shape[1] // hd, hd).transpose(1, 2)

        o = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True, enable_gqa=hq != hkv)
        return o.transpose(1, 2).reshape(q.shape[0], hq * hd)


class LlamaMLP(_Fusable):
    """gate_proj, up_proj, down_proj (no bias), silu(gate) * up; patched (swiglu): gate_up_proj
    [2F, d] with rows gate[0], up[0], gate[1], ... and SwiGLU in its epilogue (coda.rmsnorm_swiglu)."""

    FUSED, PARTS = "gate_up_proj", ("gate_proj", "up_proj")

    def __init__(self, hidden_size, intermediate_size, *, projections=None):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = projections or (
            nn.Linear(hidden_size, intermediate_size, bias=False), nn.Linear(hidden_size, intermediate_size, bias=False),
            nn.Linear(intermediate_size, hidden_size, bias=False))

    def _join(self, parts):
        return torch.stack(parts, dim=1).reshape(-1, parts[0].shape[1])

    def _split(self, w):
        return w[0::2], w[1::2]

    def act(self, n):
        """silu(gate) * up of the normed input, [M, F]."""
        if self.fused:
            return CF.rmsnorm_swiglu(n.h, self.gate_up_proj.weight, n.r)
        y = n.value()
        return F.silu(self.gate_proj(y)) * self.up_proj(y)


class LlamaDecoderLayer(nn.Module):
    """self_attn, mlp, input_layernorm, post_attention_layernorm: x + attn(norm(x)), then + mlp(norm(.))."""

    def __init__(self, config):
        super().__init__()
        c = config
        self.self_attn = LlamaAttention(c.hidden_size, c.num_attention_heads, c.num_key_value_heads, c.head_dim)
        self.mlp = LlamaMLP(c.hidden_size, c.intermediate_size)
        self.input_layernorm = LlamaRMSNorm(c.hidden_size, c.rms_norm_eps)
        self.post_attention_layernorm = LlamaRMSNorm(c.hidden_size, c.rms_norm_eps)

    def forward(self, hidden_states, positions, freqs, fusion=Fusion()):
        """One layer on its own: hidden_states [B, S, d], positions [B * S] (int), freqs = the model's
        coda_rope_freqs. Returns [B, S, d]."""
        b, s, d = hidden_states.shape
        x = hidden_states.reshape(b * s, d)
        y = self.self_attn.attend(*self.self_attn.qkv(_first_norm(x, self.input_layernorm, fusion), positions, freqs), b)
        return _tail(self, y, x, None, fusion)[0].view(b, s, d)


class LlamaModel(nn.Module):
    """embed_tokens, layers, norm; forward(input_ids) -> last_hidden_state = norm(x) [B, S, d]."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(LlamaDecoderLayer(config) for _ in range(config.num_hidden_layers))
        self.norm = LlamaRMSNorm(config.hidden_size, config.rms_norm_eps)
        s = config.rope_scaling or {}
        freqs = ops.rope_frequencies(config.head_dim, config.rope_theta, s.get("factor", 0.0),
                                     s.get("low_freq_factor", 1.0), s.get("high_freq_factor", 4.0),
                                     s.get("original_max_position_embeddings", 8192.0))
        self.coda_rope_freqs = freqs
        self.coda_fusion = Fusion()

    def forward(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
        return _model_forward(self, input_ids=input_ids, position_ids=position_ids, inputs_embeds=inputs_embeds,
                              **kwargs)


class LlamaForCausalLM(nn.Module):
    """model, lm_head; forward(input_ids, labels=None) -> CausalLMOutput(loss, logits) with
    transformers' loss: labels shifted by one inside, ignore_index -100, mean over the tokens (or
    sum / num_items_in_batch)."""

    def __init__(self, config):
        super().__init__()
        self.config = config
        self.model = LlamaModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    def forward(self, input_ids=None, labels=None, position_ids=None, inputs_embeds=None, **kwargs):
        return _causal_lm_forward(self, input_ids=input_ids, labels=labels, position_ids=position_ids,
                                  inputs_embeds=inputs_embeds, **kwargs)


# ---- the forward (coda.nn's, and a patched transformers model's) --------------------------------------------

# Keyword arguments transformers passes that change nothing here.
_IGNORED = {"use_cache", "cache_position", "return_dict", "output_attentions", "output_hidden_states"}


def _check_kwargs(kwargs):
    for name, value in kwargs.items():
        if name in ("cache", "past_key_values") and value is not None:
            raise ValueError(f"coda: argument '{name}': KV-cache decoding is not supported by coda's fused forward "
                             f"(training and prefill only)")
        if name in ("output_attentions", "output_hidden_states") and value:
            raise ValueError(f"coda: argument '{name}=True' is not supported by coda's fused forward")
        if name == "attention_mask" and value is not None and not bool(value.all()):
            raise ValueError("coda: argument 'attention_mask' masks tokens; coda's forward runs causal attention over "
                             "whole sequences only (no padding masks: pack or trim the batch)")
        if name not in _IGNORED and name != "attention_mask" and value is not None:
            raise ValueError(f"coda: argument '{name}' is not supported by coda's fused forward")


def _output(module, cls, **fields):
    """coda.nn's output, or transformers' class of the same role for a patched transformers model."""
    if type(module).__module__.startswith("transformers."):
        from transformers import modeling_outputs
        name = {BaseModelOutput: "BaseModelOutputWithPast", CausalLMOutput: "CausalLMOutputWithPast"}[cls]
        return getattr(modeling_outputs, name)(**fields)
    return cls(**fields)


def _positions(position_ids, b, s, device):
    if position_ids is None:
        return torch.arange(s, device=device, dtype=torch.int32).repeat(b)
    position_ids = position_ids.expand(b, s)
    if s > 1 and bool((position_ids.diff(dim=1) != 1).any()):
        raise ValueError("coda: argument 'position_ids' must count up by one along each sequence (packed sequences "
                         "would need a block-causal mask, which coda's forward does not build)")
    return position_ids.reshape(-1).to(torch.int32)


def _freqs(model, device):
    """The RoPE frequencies (fp32 turns per position) on `device`. They are kept out of the module's
    buffers so that model.to(torch.bfloat16) does not round them."""
    cache = model.__dict__.setdefault("_coda_freqs_on", {})
    if device not in cache:
        cache[device] = model.coda_rope_freqs.to(device)
    return cache[device]


def _hidden(model, input_ids, position_ids, inputs_embeds, kwargs):
    """The decoder stack: (normed output of the final norm, batch, sequence)."""
    _check_kwargs(kwargs)
    if (input_ids is None) == (inputs_embeds is None):
        raise ValueError("coda: pass exactly one of 'input_ids' and 'inputs_embeds'")
    x = model.embed_tokens(input_ids) if inputs_embeds is None else inputs_embeds
    b, s, d = x.shape
    x = x.reshape(b * s, d)
    positions = _positions(position_ids, b, s, x.device)
    fusion, freqs, layers = model.coda_fusion, _freqs(model, x.device), model.layers
    block = fusion.rmsnorm and fusion.swiglu and fusion.rope
    q, k, v = layers[0].self_attn.qkv(_first_norm(x, layers[0].input_layernorm, fusion), positions, freqs)
    for i, layer in enumerate(layers):
        y = layer.self_attn.attend(q, k, v, b)
        nxt = layers[i + 1] if i + 1 < len(layers) else None
        if block and nxt is not None:  # coda-math.md 6: this layer's MLP through the next layer's QKV
            attn, mlp = nxt.self_attn, layer.mlp
            x, qkv = CF.llama3_block(
                y, x, layer.self_attn.o_proj.weight, mlp.gate_up_proj.weight, mlp.down_proj.weight,
                attn.qkv_proj.weight, layer.post_attention_layernorm.weight, nxt.input_layernorm.weight, positions,
                freqs, attn.heads, layer.post_attention_layernorm.variance_epsilon)
            hq, hkv, hd = attn.heads
            q, k, v = qkv.split((hq * hd, hkv * hd, hkv * hd), dim=1)
            continue
        x, n = _tail(layer, y, x, model.norm if nxt is None else nxt.input_layernorm, fusion)
        if nxt is not None:
            q, k, v = nxt.self_attn.qkv(n, positions, freqs)
    return n, b, s


def _model_forward(self, input_ids=None, position_ids=None, inputs_embeds=None, **kwargs):
    n, b, s = _hidden(self, input_ids, position_ids, inputs_embeds, kwargs)
    return _output(self, BaseModelOutput, last_hidden_state=n.value().view(b, s, -1))


def _causal_lm_forward(self, input_ids=None, labels=None, position_ids=None, inputs_embeds=None,
                       logits_to_keep=0, num_items_in_batch=None, shift_labels=None, **kwargs):
    model = self.model
    n, b, s = _hidden(model, input_ids, position_ids, inputs_embeds, kwargs)
    loss = logits = None
    want_loss = labels is not None or shift_labels is not None
    if want_loss:
        if shift_labels is None:  # transformers' ForCausalLMLoss: position t predicts label t + 1
            shift_labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]
        targets = shift_labels.reshape(-1)
        reduction = "mean" if num_items_in_batch is None else "sum"
    if want_loss and model.coda_fusion.lm_head_loss:
        loss = CF.lm_head_cross_entropy(n.h, self.lm_head.weight, targets, n.r, reduction=reduction)
    else:
        y = n.value().view(b, s, -1)
        logits = self.lm_head(y if not logits_to_keep else y[:, -logits_to_keep:])
        if want_loss:
            loss = F.cross_entropy(logits.float().view(-1, logits.shape[-1]), targets.to(logits.device),
                                   ignore_index=IGNORE_INDEX, reduction=reduction)
    if num_items_in_batch is not None and loss is not None:
        loss = loss / num_items_in_batch
    return _output(self, CausalLMOutput, loss=loss, logits=logits)



# ---- coda.patch ---------------------------------------------------------------------------------------------

def _parts(model):
    """(the decoder stack, the causal LM or None) of a LlamaForCausalLM or a LlamaModel."""
    if hasattr(model, "lm_head") and hasattr(model, "model"):
        return model.model, model
    if hasattr(model, "layers") and hasattr(model, "embed_tokens"):
        return model, None
    raise ValueError(f"coda.patch: argument 'model' must be a LLaMA causal LM or decoder (with .model.layers and "
                     f".lm_head, or .layers and .embed_tokens); got {type(model).__name__}")


def _heads(config):
    return (config.num_attention_heads, config.num_key_value_heads,
            getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads)


def _check_shapes(config):
    """The C ABI's rules on a model's shapes: every GEMM's K (hidden size, FFN width, heads *
    head_dim) a multiple of 8 (operand rows of 16 bytes in bf16/fp16), an even head_dim. Output
    widths (the vocabulary, q/k/v) may be anything: coda pads the rows of its outputs."""
    hq, hkv, hd = _heads(config)
    for name, value in (("hidden_size", config.hidden_size), ("intermediate_size", config.intermediate_size),
                        ("num_attention_heads * head_dim", hq * hd)):
        if value % 8:
            raise ValueError(f"coda.patch: config.{name} = {value} is not a multiple of 8; coda's GEMMs need "
                             f"operand rows of a multiple of 16 bytes (8 bfloat16 / float16 values)")
    if hd % 2:
        raise ValueError(f"coda.patch: config.head_dim = {hd} must be even (RoPE rotates pairs)")


def _adopt_transformers(base, lm):
    """Turn a transformers LlamaModel (and its LlamaForCausalLM) into coda.nn's structure in place:
    coda.nn attention and MLP modules around the same Linear modules (the Parameters are kept), the
    RoPE frequencies of its rotary embedding, coda's forward bound to both instances."""
    config = base.config
    if getattr(config, "model_type", None) != "llama":
        raise ValueError(f"coda.patch: supports LLaMA models (config.model_type 'llama'), got "
                         f"{getattr(config, 'model_type', None)!r}")
    if getattr(config, "hidden_act", "silu") != "silu":
        raise ValueError(f"coda.patch: config.hidden_act must be 'silu' (SwiGLU), got {config.hidden_act!r}")
    rotary = type(base.rotary_emb)(config=config)  # fresh: the model's own inv_freq may be rounded to bf16
    if getattr(rotary, "rope_type", "default").startswith(("dynamic", "longrope")) or rotary.attention_scaling != 1.0:
        raise ValueError(f"coda.patch: RoPE type {rotary.rope_type!r} (attention_scaling {rotary.attention_scaling}) "
                         f"is not supported: coda's RoPE takes fixed frequencies and no scaling of cos/sin")
    linears = [[layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
                layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj] for layer in base.layers]
    if any(p.bias is not None for layer in linears for p in layer):
        raise ValueError("coda.patch: the model has biased projections (attention_bias / mlp_bias); coda's operators "
                         "have no bias")
    for layer, lin in zip(base.layers, linears):
        layer.self_attn = LlamaAttention(config.hidden_size, *_heads(config), projections=lin[:4])
        layer.mlp = LlamaMLP(config.hidden_size, config.intermediate_size, projections=lin[4:])
    with torch.no_grad():
        base.coda_rope_freqs = (rotary.inv_freq.double() / (2 * math.pi)).float().cpu()
    base.forward = types.MethodType(_model_forward, base)
    if lm is not None:
        lm.forward = types.MethodType(_causal_lm_forward, lm)


def patch(model, rmsnorm=True, swiglu=True, rope=True, lm_head_loss=True):
    """Run a LLaMA model through coda's fused operators, in place; returns the model.

    model: a transformers LlamaForCausalLM or LlamaModel, or coda.nn's (then transformers need
    not be installed). rmsnorm: split every RMSNorm into the GEMMs around it (coda-math.md 5.1);
    swiglu: gate/up GEMM + SwiGLU (gate/up weights interleaved into mlp.gate_up_proj); rope: QKV GEMM
    + RoPE (q/k/v weights fused into self_attn.qkv_proj, q/k rows permuted to interleaved pairs);
    lm_head_loss: the LM head + cross-entropy when labels are given (the forward then returns
    logits=None). A flag left False keeps that part in torch. With rmsnorm, swiglu and rope the
    layers are joined by coda.llama3_block. The forward supports what training needs: input_ids or
    inputs_embeds, position_ids counting up by one, labels / shift_labels / num_items_in_batch,
    attention_mask without padding; a KV cache, padding masks or packed sequences raise ValueError.
    Build the optimizer after patching. Patching a patched model raises ValueError."""
    base, lm = _parts(model)
    if getattr(base, "coda_fusion", Fusion()) != Fusion():
        raise ValueError("coda.patch: argument 'model' is already patched")
    _check_shapes(base.config)
    if not isinstance(base, LlamaModel):
        _adopt_transformers(base, lm)
    for layer in base.layers:
        if rope:
            layer.self_attn.fuse_()
        if swiglu:
            layer.mlp.fuse_()
    base.coda_fusion = Fusion(rmsnorm, swiglu, rope, lm_head_loss)
    return model


def hf_named(model, tensors):
    """{name: tensor} of a patched model's parameters (e.g. {n: p.grad for n, p in
    model.named_parameters()}) -> the same under Hugging Face's names and layouts (q_proj, k_proj,
    v_proj, gate_proj, up_proj instead of the fused qkv_proj, gate_up_proj). A new dict."""
    out = dict(tensors)
    for name, module in model.named_modules():
        if isinstance(module, _Fusable):
            module.to_hf(out, f"{name}." if name else "")
    return out
