import json
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from suite.models import MODELS, blocks_of, build_model, kind_of, model_config, num_params
from suite.models.llama import LLAMA_CONFIGS, Llama, LlamaConfig
from suite.models.moe import MOE_CONFIGS, MoE, active_params

# A small GQA LLaMA (4 query heads share 2 K/V heads) for the tests that run a forward pass.
SMALL = {"dim": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "ffn_dim": 64, "vocab_size": 64, "max_seq_len": 16}

# (low, high) ballparks: the sizes each name promises.
LLAMA_SIZES = {
    "llama-tiny": (2.5e6, 3.5e6),
    "llama-tiny-8l": (5.5e6, 6.5e6),
    "llama-tiny-16l": (11.5e6, 12.5e6),
    "llama-tiny-w64": (0.2e6, 0.25e6),
    "llama-tiny-w128": (0.8e6, 0.85e6),
    "llama-50m": (45e6, 55e6),
    "llama-134m": (134e6 * 0.95, 134e6 * 1.05),
    "llama-500m": (500e6 * 0.95, 500e6 * 1.05),
    "llama-1b": (1.24e9 * 0.97, 1.24e9 * 1.03),
    "llama-8b": (8.03e9 * 0.97, 8.03e9 * 1.03),
}
# 8 experts of 3 x 256 x 320 in each of 4 blocks beside llama-tiny's attention, embedding and head
MOE_SIZES = {"llama-tiny-moe": (9.0e6, 9.1e6)}
# Published sizes of the CIFAR variants (10 classes): ResNet-18 11.2M, WRN-18 (2x) about 4x that,
# Swin-T 28.3M at 1000 classes less most of its head.
IMAGE_SIZES = {"resnet18": (11.0e6, 11.4e6), "wrn18": (43e6, 46e6), "swin-t": (26.5e6, 28.5e6)}
EXPECTED_BLOCKS = {"resnet18": 8, "wrn18": 8, "swin-t": 12}


def meta_build(name: str, **overrides) -> torch.nn.Module:
    with torch.device("meta"):
        return build_model(name, **overrides)


def seeded(seed: int, **overrides) -> Llama:
    torch.manual_seed(seed)
    return build_model("llama-tiny", **{**SMALL, **overrides})


def test_every_named_size_is_registered():
    assert set(LLAMA_SIZES) == set(LLAMA_CONFIGS) and set(MOE_SIZES) == set(MOE_CONFIGS)
    assert set(MODELS) == set(LLAMA_SIZES) | set(MOE_SIZES) | set(IMAGE_SIZES)


@pytest.mark.parametrize("name", list(LLAMA_SIZES) + list(MOE_SIZES) + list(IMAGE_SIZES))
def test_parameter_count_is_in_ballpark(name):
    model = meta_build(name)
    count = num_params(model)
    print(f"{name}: {count:,} parameters")
    low, high = (LLAMA_SIZES | MOE_SIZES | IMAGE_SIZES)[name]
    assert low <= count <= high, f"{name} has {count:,} parameters, expected {low:,.0f}..{high:,.0f}"


def test_llama_1b_ties_and_8b_does_not():
    tied, untied = meta_build("llama-1b"), meta_build("llama-8b")
    assert tied.output.weight is tied.tok_embeddings.weight
    assert tied.num_params(exclude_embedding=True) == num_params(tied)
    assert untied.output.weight is not untied.tok_embeddings.weight
    table = untied.tok_embeddings.weight.numel()
    assert untied.num_params(exclude_embedding=True) == num_params(untied) - table


def test_moe_sends_each_token_to_its_top_k_experts():
    torch.manual_seed(0)
    model = build_model("llama-tiny-moe", n_layers=1, max_seq_len=16)
    moe = model.layers[0].feed_forward
    assert isinstance(moe, MoE) and active_params(model.cfg, num_params(model)) < num_params(model)
    x = torch.randn(2, 16, 256)
    weights, chosen = moe.route(x.reshape(-1, 256))
    # the same sum written token by token: each token's k experts weighted by the softmax of their scores
    expected = torch.stack(
        [sum(w * moe.experts[e](t) for w, e in zip(ws, es)) for t, ws, es in zip(x.reshape(-1, 256), weights, chosen)]
    )
    torch.testing.assert_close(moe(x), expected.view_as(x), rtol=1e-5, atol=1e-6)
    assert torch.allclose(weights.sum(-1), torch.ones(32))


def test_llama_logits_shape():
    model = seeded(0)
    assert model(torch.randint(0, 64, (3, 16))).shape == (3, 16, 64)


@settings(max_examples=15, deadline=None)
@given(pos=st.integers(0, 15), token=st.integers(0, 63), seed=st.integers(0, 2**16))
def test_changing_a_token_leaves_earlier_logits_unchanged(pos, token, seed):
    torch.manual_seed(seed)
    model = build_model("llama-tiny", **SMALL)
    tokens = torch.randint(0, 64, (2, 16))
    changed = tokens.clone()
    changed[:, pos] = (tokens[:, pos] + 1 + token % 63) % 64
    with torch.no_grad():
        before, after = model(tokens), model(changed)
    torch.testing.assert_close(before[:, :pos], after[:, :pos], rtol=0, atol=1e-6)
    assert not torch.allclose(before[:, pos], after[:, pos]), "the changed position's logits must change"


@pytest.mark.parametrize("tie", [False, True])
def test_meta_to_empty_init_weights_matches_direct_construction(tie):
    direct = seeded(7, tie_embeddings=tie)
    torch.manual_seed(7)
    with torch.device("meta"):
        deferred = build_model("llama-tiny", **SMALL, tie_embeddings=tie)
    deferred.to_empty(device="cpu")
    deferred.init_weights()
    assert (deferred.output.weight is deferred.tok_embeddings.weight) == tie
    for (name, a), (_, b) in zip(direct.state_dict().items(), deferred.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=0, atol=0, msg=name)
    tokens = torch.randint(0, 64, (2, 16))
    with torch.no_grad():
        out = deferred(tokens)
        assert torch.isfinite(out).all()
        torch.testing.assert_close(out, direct(tokens), rtol=0, atol=0)


def test_same_seed_same_model_other_seed_other_model():
    a, b, c = seeded(3), seeded(3), seeded(4)
    for (name, x), y, z in zip(a.state_dict().items(), b.state_dict().values(), c.state_dict().values()):
        torch.testing.assert_close(x, y, rtol=0, atol=0, msg=name)
        if "norm" in name:
            continue
        assert not torch.equal(x, z), f"{name} ignores the seed"


def test_init_weights_scales_residual_projections_and_sets_norms_to_one():
    torch.manual_seed(0)
    model = build_model("llama-tiny", n_layers=8, vocab_size=64, max_seq_len=16)
    torch.nn.init.zeros_(model.norm.weight)
    model.init_weights()
    out_std = 0.02 / math.sqrt(2 * 8)
    stds = {name: p.std().item() for name, p in model.named_parameters()}
    for name, std in stds.items():
        if "norm" in name:
            continue
        expected = out_std if name.endswith(("wo.weight", "w2.weight")) else 0.02
        assert std == pytest.approx(expected, rel=0.1), name
    for name, p in model.named_parameters():
        if "norm" in name:
            assert torch.equal(p, torch.ones_like(p)), name


@pytest.mark.parametrize("name", list(MODELS))
def test_blocks_cover_the_model_and_do_not_share_parameters(name):
    model = meta_build(name)
    blocks = blocks_of(model)
    expected = model.cfg.n_layers if kind_of(name) == "lm" else EXPECTED_BLOCKS[name]
    assert len(blocks) == expected
    if kind_of(name) == "lm":
        assert blocks == list(model.layers)
    ids = [{id(p) for p in block.parameters()} for block in blocks]
    assert all(ids), "every block holds parameters"
    assert sum(map(len, ids)) == len(set().union(*ids)), "blocks share a parameter"
    in_blocks = sum(p.numel() for block in blocks for p in block.parameters())
    assert in_blocks < num_params(model)


@pytest.mark.parametrize("name", ["resnet18", "wrn18", "swin-t"])
def test_vision_models_classify_32px_images(name):
    assert kind_of(name) == "image"
    model = build_model(name).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 32, 32)).shape == (2, 10)
        gray = build_model(name, in_channels=1, num_classes=100).eval()
        assert gray(torch.randn(2, 1, 32, 32)).shape == (2, 100)


def test_config_overrides_reach_the_model_and_serialise():
    config = model_config("llama-tiny", vocab_size=512, max_seq_len=32)
    assert json.loads(json.dumps(config)) == config
    assert config["vocab_size"] == 512 and config["dim"] == LLAMA_CONFIGS["llama-tiny"].dim
    model = meta_build("llama-tiny", vocab_size=512, max_seq_len=32)
    assert model.output.out_features == 512 and model.rope_cos.shape[0] == 32
    assert model_config("resnet18", num_classes=100) == {"num_classes": 100, "in_channels": 3}


def test_unknown_model_names_the_choices():
    with pytest.raises(ValueError, match=r"unknown model 'x'; choose one of: .*llama-tiny.*swin-t"):
        build_model("x")
    with pytest.raises(ValueError, match="unknown model"):
        kind_of("resnet50")


@pytest.mark.parametrize("name,key", [("llama-tiny", "num_classes"), ("resnet18", "vocab_size")])
def test_bad_override_key_names_the_valid_keys(name, key):
    valid = ", ".join(MODELS[name].defaults)
    with pytest.raises(ValueError, match=f"valid keys: {valid}"):
        build_model(name, **{key: 10})


def test_bad_override_value_is_rejected():
    with pytest.raises(ValueError, match="'dim' must be int"):
        model_config("llama-tiny", dim="256")
    with pytest.raises(ValueError, match="not divisible by n_heads"):
        build_model("llama-tiny", dim=100)
    with pytest.raises(ValueError, match="not a multiple of n_kv_heads"):
        LlamaConfig(dim=64, n_layers=1, n_heads=4, n_kv_heads=3, vocab_size=8, ffn_dim=8, max_seq_len=8)


def test_too_long_sequence_and_unknown_module_are_clear_errors():
    model = seeded(0)
    with pytest.raises(ValueError, match="exceeds max_seq_len 16"):
        model(torch.zeros(1, 17, dtype=torch.long))
    with pytest.raises(ValueError, match="no residual blocks"):
        blocks_of(torch.nn.Linear(2, 2))
