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


def test_each_family_s_step_is_made_of_what_its_architecture_says():
    """The ResNet's step is mostly convolution, with BatchNorm and ReLU, its only softmax the loss's;
    ViT's mostly matmul, with attention's softmax and GELU, and no normalisation but LayerNorm. In
    the precision the benchmark profiles, so bf16's casts are exercised where the CPU runs it."""
    kinds = {}
    for family, largest in (("resnet", "convolution"), ("vit", "matmul")):
        ms, kinds[family], ops = profile_step(family, "tiny", 4, cpu_precision(), steps=1)
        assert max(kinds[family], key=kinds[family].get) == largest
        assert {"normalisation", "activations", "copies, casts"} <= kinds[family].keys()
        assert family != "resnet" or ops[0][0] in {"aten::convolution_backward", "aten::mkldnn_convolution"}
    assert kinds["vit"]["softmax"] > 3 * kinds["resnet"].get("softmax", 0.0)
    assert kinds["resnet"].get("matmul", 0.0) < 0.05 < kinds["vit"]["matmul"]
