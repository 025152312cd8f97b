"""Attention probes (modules/probes/attention.py): mean attention distance on hand-made attention
with answers computed here by brute force, then on built tiny models (shapes, ranges, Swin's
window bound, flags and outputs restored), [CLS] attention and rollout."""
from __future__ import annotations

import itertools
import math

import pytest
import torch

from modules import ARCHS, build_model
from modules.probes.attention import (attention_distance_from, attention_entropy, attention_entropy_from,
                                      attention_probs, attention_rollout, cls_attention, mean_attention_distance,
                                      patch_centres)

GRID, PATCH = 7, 4  # a 7x7 grid of 4-pixel patches: vit/deit at 28x28 with patch 4
CENTRES = [(PATCH * i + PATCH / 2, PATCH * j + PATCH / 2) for i in range(GRID) for j in range(GRID)]  # row-major


def _centres() -> torch.Tensor:
    return torch.tensor(CENTRES, dtype=torch.float64)


def _mean_pairwise(centres, scale: float = 1.0) -> float:
    """Uniform attention's answer: mean distance over all (query, key) pairs, self pairs included."""
    pairs = list(itertools.product(centres, repeat=2))
    return scale * sum(math.dist(a, b) for a, b in pairs) / len(pairs)


def _softmax_rows(b, h, n, seed=0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(b, h, n, n, generator=g, dtype=torch.float64).softmax(-1)


# ---------------- the core function on known attention ----------------
def test_identity_attention_has_distance_zero():
    n = GRID * GRID
    probs = torch.eye(n).expand(2, 3, n, n)
    assert torch.equal(attention_distance_from(probs, _centres()), torch.zeros(3))


def test_uniform_attention_gives_mean_pairwise_distance():
    n = GRID * GRID
    probs = torch.full((2, 2, n, n), 1 / n, dtype=torch.float64)
    expected = _mean_pairwise(CENTRES)
    assert attention_distance_from(probs, _centres()).tolist() == pytest.approx([expected] * 2, rel=1e-12)


def test_right_neighbour_is_one_patch():
    n = GRID * GRID
    probs = torch.zeros(1, 1, n, n)
    for i, j in itertools.product(range(GRID), range(GRID)):
        q = i * GRID + j
        probs[0, 0, q, q + 1 if j + 1 < GRID else q - 1] = 1.0  # right neighbour, or left on the last column
    assert attention_distance_from(probs, _centres()).tolist() == [PATCH]


@pytest.mark.parametrize("prefix", [1, 2])
def test_prefix_tokens_are_dropped_and_rows_renormalised(prefix):
    n = GRID * GRID
    patches = _softmax_rows(2, 3, n)
    with_prefix = _softmax_rows(2, 3, n + prefix, seed=1)  # arbitrary weights on the prefix rows/columns
    mass = 1 - with_prefix[..., prefix:, :prefix].sum(-1, keepdim=True)  # what each patch query leaves for patches
    with_prefix[..., prefix:, prefix:] = patches * mass                   # rows still sum 1 over all keys
    expected = attention_distance_from(patches, _centres())
    got = attention_distance_from(with_prefix, _centres(), num_prefix_tokens=prefix)
    assert torch.allclose(got, expected, rtol=1e-12, atol=0)


def test_shape_mismatch_is_one_line_error():
    with pytest.raises(ValueError, match=r"^probs of shape \(1, 1, 50, 50\): allowed \(B, heads, 49, 49\)") as e:
        attention_distance_from(torch.zeros(1, 1, 50, 50), _centres())
    assert "\n" not in str(e.value)


def test_patch_centres_of_vit_and_hybrid():
    for family in ("vit", "hybrid"):
        c = patch_centres(build_model(family, "tiny"), 28)
        assert c.tolist() == [list(x) for x in CENTRES], family


# ---------------- built models ----------------
def _model(family: str, **kw):
    torch.manual_seed(0)
    return build_model(family, "tiny", image_size=28, in_chans=1, num_classes=10, **kw)


def _images(n: int = 2) -> torch.Tensor:
    return torch.randn(n, 1, 28, 28, generator=torch.Generator().manual_seed(0))


def _expected_shape(family):
    arch = ARCHS[family, "tiny"]
    if family == "swin":
        return sum(arch["depths"]), max(arch["num_heads"])
    return arch["depth"], arch["num_heads"]


def _swin_rows():
    """(stage, heads) of every Swin block in order."""
    arch = ARCHS["swin", "tiny"]
    return [(s, h) for s, (d, h) in enumerate(zip(arch["depths"], arch["num_heads"])) for _ in range(d)]


@pytest.mark.parametrize("family", ["vit", "deit", "hybrid", "swin"])
def test_distance_on_built_models(family):
    model, x = _model(family), _images()
    flagged = [m for m in model.modules() if hasattr(m, "fused_attn")]
    assert flagged
    for m in flagged:
        m.fused_attn = True
    model.eval()
    with torch.no_grad():
        before = model(x)
    model.train()

    d = mean_attention_distance(model, x)

    assert all(m.fused_attn is True for m in flagged)  # flags restored
    assert model.training                                # mode restored
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(x), before)             # the probe left the model as it was
    assert tuple(d.shape) == _expected_shape(family)
    if family == "swin":
        for row, (_, heads) in zip(d, _swin_rows()):
            assert torch.isfinite(row[:heads]).all() and torch.isnan(row[heads:]).all()
    else:
        assert torch.isfinite(d).all()
    finite = d[torch.isfinite(d)]
    assert (finite >= 0).all() and (finite <= 28 * math.sqrt(2)).all()


def test_swin_distances_stay_within_a_window():
    window = 7  # default window at 28x28 (stage grids 28/14/7)
    d = mean_attention_distance(_model("swin"), _images())
    for row, (stage, heads) in zip(d, _swin_rows()):
        bound = (window - 1) * math.sqrt(2) * 2 ** stage  # the window's diagonal x the stage's pixel stride
        assert (row[:heads] <= bound + 1e-5).all(), (stage, row)


def _uniform_qk(model):
    """Zero the query and key projections (and Swin's position bias): every softmax is uniform
    over the keys it may see."""
    with torch.no_grad():
        for m in model.modules():
            if hasattr(m, "fused_attn"):
                rows = 2 * m.qkv.out_features // 3  # qkv rows: (q, k, v) x heads x head_dim
                m.qkv.weight[:rows] = 0
                if m.qkv.bias is not None:
                    m.qkv.bias[:rows] = 0
                if hasattr(m, "relative_position_bias_table"):
                    m.relative_position_bias_table.zero_()
    return model


@pytest.mark.parametrize("family", ["vit", "deit", "hybrid"])
def test_uniform_model_attention_gives_mean_pairwise_distance(family):
    """Prefix tokens dropped and renormalised on a real model: the 7x7 tokens are 4 pixels apart."""
    d = mean_attention_distance(_uniform_qk(_model(family)), _images())
    assert torch.allclose(d, torch.full_like(d, _mean_pairwise(CENTRES)), rtol=1e-5)


def test_uniform_swin_unshifted_windows_give_mean_pairwise_distance():
    d = mean_attention_distance(_uniform_qk(_model("swin")), _images())
    unit = [(i, j) for i in range(7) for j in range(7)]
    # stage 0's first block (stride 1, unshifted) and every block of stage 2 (stride 4, one window = the grid)
    assert d[0, 0].item() == pytest.approx(_mean_pairwise(unit, 1), rel=1e-5)
    for row, (stage, heads) in zip(d, _swin_rows()):
        if stage == 2:
            assert row[:heads].tolist() == pytest.approx([_mean_pairwise(unit, 4)] * heads, rel=1e-5)


def test_attention_probs_shapes_rows_and_swin_mask():
    x = _images()
    for family, n in (("vit", 50), ("deit", 51), ("hybrid", 50)):
        depth, heads = _expected_shape(family)
        probs = attention_probs(_model(family), x)
        assert [tuple(p.shape) for p in probs] == [(2, heads, n, n)] * depth, family
        assert all(torch.allclose(p.sum(-1), torch.ones(())) for p in probs)
    probs = attention_probs(_model("swin"), x)
    windows = [(28 // 7) ** 2] * 2 + [(14 // 7) ** 2] * 2 + [1] * 4
    assert [tuple(p.shape) for p in probs] == [(2 * w, h, 49, 49) for w, (_, h) in zip(windows, _swin_rows())]
    assert all(torch.allclose(p.sum(-1), torch.ones(())) for p in probs)
    # stage 0's second block shifts: image 0's last window (bottom-right, wrapped) masks pairs from
    # different regions. timm's mask adds -100, not -inf: masked weights are ~e^-100, not 0.
    masked = 1e-30
    assert (probs[0] > masked).all() and (probs[1][0] > masked).all()
    assert (probs[1][windows[0] - 1] < masked).any()


@pytest.mark.parametrize("family", ["resnet", "convnext"])
def test_families_without_attention_raise(family):
    model = _model(family)
    for probe in (mean_attention_distance, attention_probs, cls_attention, attention_rollout):
        with pytest.raises(ValueError, match=f"^family '{family}' has no attention layers: allowed vit, deit, hybrid"):
            probe(model, _images())


# ---------------- [CLS] attention and rollout ----------------
@pytest.mark.parametrize("family", ["vit", "deit", "hybrid"])
def test_cls_attention_and_rollout(family):
    model, x = _model(family), _images()
    prefix = 2 if family == "deit" else 1
    heads = _expected_shape(family)[1]
    cls = cls_attention(model, x)
    assert tuple(cls.shape) == (2, heads, GRID, GRID)
    last = attention_probs(model, x)[-1]
    assert torch.equal(cls.flatten(2), last[:, :, 0, prefix:])  # cls query row, prefix keys dropped
    assert (cls >= 0).all() and (cls.sum((-2, -1)) < 1).all()

    roll = attention_rollout(model, x)
    assert tuple(roll.shape) == (2, GRID, GRID)
    assert (roll >= 0).all() and torch.allclose(roll.sum((-2, -1)), torch.ones(2))


@pytest.mark.parametrize("family, tokens", [("vit", 50), ("deit", 51)])
def test_uniform_attention_gives_uniform_cls_attention_and_rollout(family, tokens):
    """Uniform U: (0.5 U + 0.5 I)^L = 0.5^L I + (1 - 0.5^L) U, so the [CLS] row is flat over patches."""
    model, x = _uniform_qk(_model(family)), _images()
    assert torch.allclose(cls_attention(model, x), torch.full((2, 4, GRID, GRID), 1 / tokens))
    assert torch.allclose(attention_rollout(model, x), torch.full((2, GRID, GRID), 1 / GRID ** 2))


def test_cls_probes_reject_swin_and_avg_pool():
    for probe in (cls_attention, attention_rollout):
        with pytest.raises(ValueError, match="^family 'swin' has no \\[CLS\\] token .*: allowed vit, deit, hybrid$"):
            probe(_model("swin"), _images())
        with pytest.raises(ValueError, match="global_pool='avg' has no class token"):
            probe(_model("vit", pool="avg"), _images())
    with pytest.raises(ValueError, match="^family 'swin' has no single global patch grid"):
        patch_centres(_model("swin"), 28)


@pytest.mark.parametrize("family", ["vit", "deit", "hybrid", "swin"])
def test_uniform_reference_equals_a_model_with_uniform_attention(family):
    """uniform=True on a trained-looking (random) model gives what a model whose softmax is uniform
    over the same keys gives, Swin's shifted-window masks included; for vit, the brute-force value."""
    model, x = _model(family), _images()
    reference = mean_attention_distance(model, x, uniform=True)
    measured = mean_attention_distance(model, x)
    assert not torch.allclose(measured, reference, equal_nan=True)    # a random model is not uniform
    assert torch.allclose(reference, mean_attention_distance(_uniform_qk(model), x), rtol=1e-5, equal_nan=True)
    if family != "swin":
        assert torch.allclose(reference, torch.full_like(reference, _mean_pairwise(CENTRES)), rtol=1e-5)


def test_entropy_separates_concentration_from_distance():
    """Two heads with the same mean distance (uniform over the 7x7 grid against all weight split
    between a patch's far partners): distance cannot tell them apart, entropy can (issue 41)."""
    n = GRID * GRID
    uniform = torch.full((1, 1, n, n), 1.0 / n)
    far = torch.zeros(1, 1, n, n)   # each query: half its weight on its own patch, half on the point-mirrored one
    for q in range(n):
        far[0, 0, q, q] += 0.5
        far[0, 0, q, n - 1 - q] += 0.5
    both = torch.cat([uniform, far], 1)
    assert attention_entropy_from(uniform).item() == pytest.approx(1.0)
    # every query but the centre spreads evenly over 2 of its 49 keys; the centre puts all on itself
    assert attention_entropy_from(far).item() == pytest.approx((n - 1) / n * math.log(2) / math.log(n), rel=1e-6)
    # Swin's masked keys: uniform over the keys a query may see is 1, whatever the mask
    window = torch.zeros(1, 1, 4, 4)
    window[..., :2, :2], window[..., 2:, 2:] = 0.5, 0.5
    assert attention_entropy_from(window, masked=True).item() == pytest.approx(1.0)
    assert attention_entropy_from(both, 0).shape == (2,)


@pytest.mark.parametrize("family", ["vit", "deit", "hybrid", "swin"])
def test_entropy_of_built_models_and_of_uniform_attention(family):
    """(layers, heads) as mean_attention_distance gives (Swin: NaN-padded); 1 wherever the softmax is
    uniform over the keys it may see (prefix tokens dropped, Swin's masked keys left out); below 1
    for a model that concentrates."""
    model, x = _model(family), _images()
    e = attention_entropy(model, x)
    assert e.shape == _expected_shape(family)
    values = e[~e.isnan()]
    assert ((values > 0) & (values <= 1 + 1e-6)).all()
    flat = attention_entropy(_uniform_qk(_model(family)), x)
    assert torch.allclose(flat[~flat.isnan()], torch.ones_like(flat[~flat.isnan()]), atol=1e-5)
