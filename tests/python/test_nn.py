"""coda.nn and coda.patch: a patched LLaMA's loss, logits and every parameter's gradient against
the same model unpatched, under design.md's rule (float64 unpatched = the truth, bf16 unpatched =
the unfused PyTorch pipeline, bf16 patched = coda; the rule per tensor). coda.nn models run with
transformers blocked from import; transformers' LlamaForCausalLM (skipped without transformers)
with a vocabulary of 32003, whose stored LM-head grad needs padded rows. Fresh random weights every
run.
The patched models that run llama3_block or rmsnorm_qkv_rope run on both backward paths: the fused
one (the default: CODA_FUSED_BACKWARD unset) and the composed one (CODA_FUSED_BACKWARD=0), checked by
the calls of coda's fused backward operators.
"""

import copy
import sys

import pytest
import torch

import coda
from common import BF16, F64, assert_rule

try:
    import transformers
except ImportError:
    transformers = None

needs_transformers = pytest.mark.skipif(transformers is None, reason="transformers is not installed "
                                        "(pip install transformers)")
TINY = dict(hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            head_dim=16, rms_norm_eps=1e-5)
FLAGS = {
    "all": {},
    "rmsnorm-only": dict(swiglu=False, rope=False, lm_head_loss=False),
    "no-rmsnorm": dict(rmsnorm=False),
}
# (flags, backward path): the fused backward (the default) where llama3_block and rmsnorm_qkv_rope run
# ("all"; "no-rmsnorm": rmsnorm_qkv_rope without rstd, no llama3_block).
CASES = [(f, "composed") for f in FLAGS] + [("all", "fused"), ("no-rmsnorm", "fused")]
# The fused backward operators one training step calls on the fused path (two layers).
FUSED_CALLS = {
    # one llama3_block (1 RoPE, 2 RMSNorm, 1 SwiGLU backward) and the first layer's rmsnorm_qkv_rope
    "all": {"rope_backward": 2, "gemm_rmsnorm_backward": 2, "gemm_swiglu_backward": 1},
    "no-rmsnorm": {"rope_backward": 2},  # each layer's rmsnorm_qkv_rope
}


def select_backward(monkeypatch, path):
    """CODA_FUSED_BACKWARD unset for the fused path (the default), "0" for the composed one; counts
    the calls of coda's fused backward operators. Returns {op: calls}."""
    if path == "fused":
        monkeypatch.delenv("CODA_FUSED_BACKWARD", raising=False)
    else:
        monkeypatch.setenv("CODA_FUSED_BACKWARD", "0")
    calls = {}
    for op in ("rope_backward", "gemm_rmsnorm_backward", "gemm_swiglu_backward"):
        def spy(*args, _real=getattr(coda.ops, op), _op=op, **kwargs):
            calls[_op] = calls.get(_op, 0) + 1
            return _real(*args, **kwargs)
        monkeypatch.setattr(coda.ops, op, spy)
    return calls


def randomize(model, gen):
    """Fresh weights, norm weights away from 1 (so that their gradients mean something)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(1 + 0.2 * torch.randn(p.shape, generator=gen) if "norm" in name
                    else 0.1 * torch.randn(p.shape, generator=gen))
    return model


def step(model, ids, labels):
    """(loss, logits without labels, gradients under Hugging Face's names)."""
    loss = model(input_ids=ids, labels=labels).loss
    loss.backward()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    return loss, logits, coda.nn.hf_named(model, {n: p.grad for n, p in model.named_parameters()})


def check_parity(model, gen, vocab, flags, prepare=lambda m: m):
    ids = torch.randint(0, vocab, (2, 24), generator=gen)
    labels = ids.clone()
    labels[0, :5] = coda.IGNORE_INDEX
    truth = step(prepare(copy.deepcopy(model).to(F64)), ids, labels)
    base = step(prepare(copy.deepcopy(model).to(BF16)), ids, labels)
    fused = step(coda.patch(copy.deepcopy(model).to(BF16), **flags), ids, labels)
    assert_rule("loss", fused[0], truth[0], base[0], eps=1e-3)  # a scalar: one draw of rounding noise
    assert_rule("logits", fused[1], truth[1], base[1])
    assert set(fused[2]) == set(truth[2]) == {n for n, _ in model.named_parameters()}
    for name, want in truth[2].items():
        assert_rule(f"d {name}", fused[2][name], want, base[2][name])


# ---- coda.nn (no transformers) -----------------------------------------------------------------------------

@pytest.mark.parametrize("flags,path", CASES)
def test_coda_nn_patch(gen, flags, path, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers now fails
    calls = select_backward(monkeypatch, path)
    config = coda.nn.LlamaConfig(vocab_size=517, tie_word_embeddings=flags == "all",
                                 rope_scaling=dict(factor=8.0, original_max_position_embeddings=16), **TINY)
    check_parity(randomize(coda.nn.LlamaForCausalLM(config), gen), gen, 517, FLAGS[flags])
    assert calls == (FUSED_CALLS[flags] if path == "fused" else {}), calls


def test_decoder_layer_on_its_own(gen):
    config = coda.nn.LlamaConfig(vocab_size=64, **TINY)
    model = randomize(coda.nn.LlamaModel(config), gen)
    x = torch.randn(2, 24, 64, generator=gen, dtype=F64)
    positions = torch.arange(24).repeat(2)
    want = model.layers[0].to(F64)(x, positions, model.coda_rope_freqs)
    base = copy.deepcopy(model.layers[0]).to(BF16)(x.to(BF16), positions, model.coda_rope_freqs)
    layer = copy.deepcopy(model.layers[0]).to(BF16)
    layer.self_attn.fuse_()
    layer.mlp.fuse_()
    got = layer(x.to(BF16), positions, model.coda_rope_freqs, coda.nn.Fusion(True, True, True))
    assert_rule("layer", got, want, base)


def test_patch_errors(gen):
    config = coda.nn.LlamaConfig(vocab_size=64, **TINY)
    model = coda.patch(coda.nn.LlamaForCausalLM(config).to(BF16))
    with pytest.raises(ValueError, match="already patched"):
        coda.patch(model)
    ids = torch.randint(0, 64, (2, 8), generator=gen)
    with pytest.raises(ValueError, match="'attention_mask' masks tokens"):
        model(input_ids=ids, attention_mask=torch.tensor([[1] * 8, [0] + [1] * 7]))
    with pytest.raises(ValueError, match="'past_key_values': KV-cache decoding is not supported"):
        model(input_ids=ids, past_key_values=object())
    with pytest.raises(ValueError, match="'position_ids' must count up by one"):
        model(input_ids=ids, position_ids=torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4]]))
    with pytest.raises(ValueError, match="argument 'head_mask' is not supported"):
        model(input_ids=ids, head_mask=torch.ones(2))
    with pytest.raises(ValueError, match="coda.patch: config.hidden_size = 36 is not a multiple of 8"):
        coda.patch(coda.nn.LlamaForCausalLM(coda.nn.LlamaConfig(
            vocab_size=64, hidden_size=36, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
            num_key_value_heads=1, head_dim=16)))
    with pytest.raises(ValueError, match="config.intermediate_size = 100 is not a multiple of 8"):
        coda.patch(coda.nn.LlamaForCausalLM(coda.nn.LlamaConfig(vocab_size=64, **{**TINY, "intermediate_size": 100})))
    with pytest.raises(ValueError, match="argument 'model' must be a LLaMA causal LM"):
        coda.patch(torch.nn.Linear(4, 4))
    fp32 = coda.patch(coda.nn.LlamaForCausalLM(config))  # float32 weights outside autocast
    with pytest.raises(ValueError, match="coda's GEMMs take bfloat16 or float16"):
        fp32(input_ids=ids, labels=ids)
    with torch.autocast("cpu", dtype=BF16):  # inside autocast they are cast
        assert torch.isfinite(fp32(input_ids=ids, labels=ids).loss)


# ---- transformers' LlamaForCausalLM ------------------------------------------------------------------------

def hf_model(gen, vocab=32003, **overrides):
    config = transformers.LlamaConfig(vocab_size=vocab, max_position_embeddings=64, attn_implementation="sdpa",
                                      **{**TINY, **overrides})
    return randomize(transformers.LlamaForCausalLM(config), gen)


def keep_fp32_rope(model):
    """model.to(bf16) rounds transformers' inv_freq buffer to bf16 as well; restore it in fp32 so
    that the baseline does not carry a RoPE-frequency error that would loosen the rule."""
    rotary = model.model.rotary_emb
    rotary.inv_freq = type(rotary)(config=model.config).inv_freq
    return model


@needs_transformers
@pytest.mark.parametrize("flags,path", [("all", "composed"), ("rmsnorm-only", "composed"), ("all", "fused")])
def test_transformers_patch(gen, flags, path, monkeypatch):
    calls = select_backward(monkeypatch, path)
    check_parity(hf_model(gen), gen, 32003, FLAGS[flags], prepare=keep_fp32_rope)
    assert bool(calls) == (path == "fused"), calls


@needs_transformers
def test_transformers_weights_and_state_dict(gen):
    ref = hf_model(gen, vocab=517).to(BF16)
    model = coda.patch(copy.deepcopy(ref))
    layer, hf_layer = model.model.layers[1], ref.model.layers[1]
    a, m = hf_layer.self_attn, hf_layer.mlp
    heads = (4, 2, 16)
    # The fused weights are what coda's layout helpers give.
    assert torch.equal(layer.self_attn.qkv_proj.weight, coda.permute_rotate_half_to_interleaved(
        torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]), heads))
    assert torch.equal(layer.mlp.gate_up_proj.weight, coda.interleave_gate_up(m.gate_proj.weight, m.up_proj.weight))
    # state_dict() speaks Hugging Face's names and layouts, both ways.
    sd, sd_ref = model.state_dict(), ref.state_dict()
    assert set(sd) == set(sd_ref) and all(torch.equal(sd[k], sd_ref[k]) for k in sd_ref)
    fresh = coda.patch(hf_model(gen, vocab=517).to(BF16))
    fresh.load_state_dict(sd_ref)
    assert all(torch.equal(p, q) for p, q in zip(fresh.parameters(), model.parameters()))
    ref2 = hf_model(gen, vocab=517).to(BF16)
    ref2.load_state_dict(model.state_dict())
    assert all(torch.equal(p, q) for p, q in zip(ref2.parameters(), ref.parameters()))


@needs_transformers
def test_transformers_patch_rejects(gen):
    with pytest.raises(ValueError, match="biased projections"):
        coda.patch(hf_model(gen, vocab=64, attention_bias=True))
    model = hf_model(gen, vocab=64)
    model.config.hidden_act = "gelu"
    with pytest.raises(ValueError, match="config.hidden_act must be 'silu'"):
        coda.patch(model)
    assert isinstance(model.model.layers[0].self_attn, transformers.models.llama.modeling_llama.LlamaAttention)
