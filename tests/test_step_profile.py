"""make bench-profile: a family's training step split by kind of operator (benchmarks/step_profile.py)."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from step_profile import kind_of, profile_step  # noqa: E402


@pytest.mark.parametrize("name, kind", [
    ("aten::convolution_backward", "convolution"), ("aten::mkldnn_convolution", "convolution"),
    ("aten::bmm", "matmul"), ("aten::addmm", "matmul"), ("aten::native_layer_norm_backward", "normalisation"),
    ("aten::_softmax_backward_data", "softmax"), ("aten::copy_", "copies, casts"), ("aten::roll", "copies, casts"),
    ("aten::gelu_backward", "activations"), ("aten::add_", "elementwise"), ("aten::view", "other"),
    ("Optimizer.step#AdamW.step", "other")])
def test_each_operator_falls_in_its_kind(name, kind):
    assert kind_of(name) == kind


def test_the_shares_of_a_step_sum_to_one_and_name_what_each_family_is_made_of():
    """The ResNet's step is mostly convolution, its only softmax the loss's; ViT's is mostly matmul,
    with attention's softmax a larger share."""
    kinds = {}
    for family, largest in (("resnet", "convolution"), ("vit", "matmul")):
        ms, kinds[family], ops = profile_step(family, "tiny", 4, "32-true", steps=1)
        assert ms > 0 and sum(kinds[family].values()) == pytest.approx(1.0)
        assert max(kinds[family], key=kinds[family].get) == largest
        assert ops == sorted(ops, key=lambda o: -o[1]) and all(name.startswith("aten::") for name, _ in ops)
    assert kinds["vit"]["softmax"] > 3 * kinds["resnet"].get("softmax", 0.0)
