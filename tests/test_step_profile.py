"""make bench-profile: a family's training step split by kind of operator (benchmarks/step_profile.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from experiments.runs.run.cli import cpu_precision  # noqa: E402
from step_profile import kind_of, profile_step  # noqa: E402


@pytest.mark.parametrize("name, kind", [
    ("aten::convolution_backward", "convolution"), ("aten::mkldnn_convolution", "convolution"),
    ("aten::bmm", "matmul"), ("aten::addmm", "matmul"), ("aten::native_layer_norm_backward", "normalisation"),
    ("aten::_softmax_backward_data", "softmax"), ("aten::copy_", "copies, casts"), ("aten::roll", "copies, casts"),
    ("aten::gelu_backward", "activations"), ("aten::clamp_min_", "activations"),
    ("aten::threshold_backward", "activations"), ("aten::native_batch_norm", "normalisation"),
    ("aten::stack", "copies, casts"), ("aten::add_", "elementwise"), ("aten::view", "other"),
    ("aten::linalg_vector_norm", "other"), ("aten::_foreach_norm", "other"), ("aten::_foreach_mul_", "elementwise"), ("Optimizer.step#AdamW.step", "other")])
def test_each_operator_falls_in_its_kind(name, kind):
    assert kind_of(name) == kind


def test_each_family_s_step_is_made_of_the_operators_its_architecture_has():
    """Which operators a step runs, not how long each takes (time shares move with the machine's
    load): the ResNet's step convolves and batch-normalises and has no attention; ViT's has
    attention's batched matmuls and softmax and LayerNorm. In the precision the benchmark profiles."""
    from step_profile import KINDS
    seen = {}
    for family in ("resnet", "vit"):
        ms, kinds, ops = profile_step(family, "tiny", 4, cpu_precision(), steps=1)
        assert ms > 0 and set(kinds) <= {kind for kind, _ in KINDS} | {"other"}
        seen[family] = {name for name, _ in ops}
    assert {"aten::convolution_backward", "aten::native_batch_norm"} <= seen["resnet"]
    assert "aten::bmm" not in seen["resnet"] and "aten::native_layer_norm" not in seen["resnet"]
    assert {"aten::bmm", "aten::_softmax", "aten::native_layer_norm"} <= seen["vit"]
