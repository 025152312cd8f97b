"""experiments/complexity/resolution_scaling.py: a real sweep on CPU, out of memory under an address-space cap,
the skip rule on fake timings, and the log-log fits."""
import math
import resource

import pytest
import torch
from torch import nn

from experiments.complexity import resolution_scaling as rs
from modules import build_model

FIT_KW = dict(warmup=1, reps=1, min_seconds=0.01, progress=False)


@pytest.fixture(autouse=True)
def one_thread():
    """On 2 shared cores a second OpenMP thread waiting for a busy core makes every op ~10x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class ConvNet(nn.Sequential):
    """64 channels at full resolution: 2 x 64 x 512^2 floats = 128 MiB per activation at 512, 0.4 MiB at 28."""
    num_classes = 10

    def __init__(self):
        super().__init__(nn.Conv2d(1, 64, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(64, 10))


@pytest.mark.parametrize("family, resolutions", [("vit", [28, 56]), ("deit", [28])])  # deit: (cls, dist) output
def test_tiny_sweep_measures_both_modes(family, resolutions):
    rows = rs.sweep_resolutions(family, lambda r: build_model(family, "tiny", image_size=r, in_chans=1),
                                resolutions, in_chans=1, batch_size=2, device="cpu", **FIT_KW)
    assert [(r["model"], r["resolution"], r["batch_size"], r["device"]) for r in rows] == \
        [(family, r, 2, "cpu") for r in resolutions]
    for row in rows:
        for mode in rs.MODES:
            assert row[f"{mode}_status"] == "ok"
            assert row[f"{mode}_img_s"] > 0 and row[f"{mode}_peak_mib"] > 0 and row[f"{mode}_reps"] == 1
            assert row[f"{mode}_step_ms"] == pytest.approx(1e3 * 2 / row[f"{mode}_img_s"])
            assert row[f"{mode}_seconds"] > 0


def test_out_of_memory_stops_the_mode_and_restores_the_limit(capsys):
    limit = resource.getrlimit(resource.RLIMIT_AS)
    rows = rs.sweep_resolutions("conv", lambda r: ConvNet(), [28, 512, 1024], in_chans=1, batch_size=2,
                                device="cpu", memory_limit_mib=64, **{**FIT_KW, "progress": True})
    assert resource.getrlimit(resource.RLIMIT_AS) == limit
    for mode in rs.MODES:
        assert [r[f"{mode}_status"] for r in rows] == ["ok", "out of memory", "out of memory at 512"]
        assert rows[1][f"{mode}_img_s"] is None and rows[1][f"{mode}_peak_mib"] is None
    assert "conv 512px train: -, -, out of memory" in capsys.readouterr().err
    torch.empty(256, 2 ** 20)  # 1 GiB: the cap is gone


def test_out_of_memory_while_building():
    def build(r):
        torch.empty(r, r, 256)  # 256 MiB at 512
        return ConvNet()
    rows = rs.sweep_resolutions("conv", build, [28, 512], in_chans=1, batch_size=2, device="cpu",
                                modes=("infer",), memory_limit_mib=64, **FIT_KW)
    assert [r["infer_status"] for r in rows] == ["ok", "out of memory building the model"]
    assert "train_status" not in rows[0]


def fake_sweep(monkeypatch, seconds_per_step, resolutions=(100, 200, 400, 800), **kw):
    """Sweeps with measure_point replaced by step times seconds_per_step(r); returns (rows, measured)."""
    measured = []

    def measure_point(model, r, *, mode, **_):
        measured.append(r)
        s = seconds_per_step(r)
        return dict(mode=mode, status="ok", img_s=1 / s, step_ms=1e3 * s, peak_mib=1.0, reps=1, seconds=2 * s)
    monkeypatch.setattr(rs, "measure_point", measure_point)
    rows = rs.sweep_resolutions("fake", lambda r: nn.Identity(), list(resolutions), in_chans=1, batch_size=1,
                                device="cpu", modes=("infer",), warmup=1, reps=1, min_seconds=0, progress=False,
                                **kw)
    return [r["infer_status"] for r in rows], measured


def test_skip_rule_extrapolates_the_last_two_points(monkeypatch):
    # 1 s at 100; one point -> slope 4: 16 s/step at 200, 2 steps = 32 s <= 40 s; then slope 3 from
    # (100, 1 s), (200, 8 s): 64 s/step at 400 = 128 s > 40 s
    status, measured = fake_sweep(monkeypatch, lambda r: (r / 100) ** 3, max_point_seconds=40)
    assert measured == [100, 200]
    assert status == ["ok", "ok", "skipped: predicted 128 s > limit 40 s",
                      "skipped: predicted 128 s > limit 40 s at 400"]
    # flat times (fixed overheads) extrapolate with slope 2, not 0: 0.1 s x 4^2 per step at 600 = 3.2 s
    status, _ = fake_sweep(monkeypatch, lambda r: 0.1, resolutions=(100, 150, 600), max_point_seconds=3)
    assert status == ["ok", "ok", "skipped: predicted 3.2 s > limit 3 s"]


def test_skip_rule_follows_the_cost_hint(monkeypatch):
    # linear cost: 2 s/step at 200 (4 s), 4 at 400 (8 s), 8 at 800 (16 s > 10 s)
    status, measured = fake_sweep(monkeypatch, lambda r: r / 100, max_point_seconds=10,
                                  cost_hint={r: float(r) for r in (100, 200, 400, 800)})
    assert measured == [100, 200, 400] and status[3] == "skipped: predicted 16 s > limit 10 s"
    status, _ = fake_sweep(monkeypatch, lambda r: r / 100, max_point_seconds=10)  # slope 4 at 200: 32 s
    assert status[1] == "skipped: predicted 32 s > limit 10 s"


def test_slopes():
    xs = [28, 56, 112, 224]
    assert rs.loglog_slope(xs, [3 * x ** 2 for x in xs]) == pytest.approx(2)
    assert rs.loglog_slope(xs, [x ** 4 for x in xs]) == pytest.approx(4)
    assert rs.loglog_slope([1, 2, 4, 8], [1, 4, None, 0]) == pytest.approx(2)  # missing points left out
    assert rs.local_slope([4, 1, 2], [16, 1, 2]) == pytest.approx(3)            # between x = 2 and 4
    for xs, ys in (([1], [1]), ([1, 2], [1, 0]), ([1, 2], [1]), ([2, 2, 3], [1, 2, 3])):
        with pytest.raises(ValueError, match="xs=|lengths"):
            rs.loglog_slope(xs, ys)


def test_crossover():
    xs = [100, 200, 400]
    a = [x ** 2 / 1e4 for x in xs]  # 1, 4, 16
    b = [3 * x / 100 for x in xs]   # 3, 6, 12: x^2 / 1e4 = 3 x / 100 at x = 300
    assert rs.crossover(xs, a, b) == pytest.approx(300)
    assert rs.crossover(xs, b, a) is None                       # a never gets cheaper at the end
    assert rs.crossover(xs, [5, 5, 5], [1, 2, 3]) == 100         # b cheaper everywhere
    # b cheaper at 1, dearer at 2, cheaper from then on: log(b/a) goes log 2 -> log 1/2 halfway in log x
    assert rs.crossover([1, 2, 8, 16], [1, 1, 2, 2], [0.5, 2, 1, 1]) == pytest.approx(4)
    assert math.isclose(rs.crossover([1, 2, None], [1, 1, 1], [2, 1, 5]), 2)  # the dearer None point left out
    assert rs.crossover([224], [2], [1]) == 224 and rs.crossover([224], [1], [2]) is None  # one common point
    for xs, a, b in (([1, 2], [1, 2], [1]), ([1, 1], [1, 2], [1, 2]), ([1], [0], [1])):
        with pytest.raises(ValueError, match="xs=|lengths"):
            rs.crossover(xs, a, b)


def test_bad_input():
    model = ConvNet()
    for kw, match in ((dict(mode="eval"), "mode='eval'"), (dict(device="meta"), "device='meta'"),
                      (dict(reps=0), "reps=0"), (dict(memory_limit_mib=0), "memory_limit_mib=0")):
        with pytest.raises(ValueError, match=match):
            rs.measure_point(model, 28, **{**dict(in_chans=1, batch_size=1, device="cpu", mode="infer"), **kw})
    with pytest.raises(ValueError, match=r"resolutions=\[56, 28\]"):
        rs.sweep_resolutions("m", lambda r: model, [56, 28], in_chans=1, batch_size=1, device="cpu")
    with pytest.raises(ValueError, match="model.num_classes=None"):
        rs.measure_point(nn.Conv2d(1, 2, 3), 28, in_chans=1, batch_size=1, device="cpu", mode="train")


def test_memory_cap_on_cuda_sets_and_restores_the_allocator_fraction(monkeypatch):
    """The cuda path of the cap, with torch.cuda's four calls recorded (no GPU here): the fraction is
    lowered to what is reserved plus the limit, then restored."""
    from experiments.complexity.resolution_scaling import _memory_cap
    fractions = []
    monkeypatch.setattr(torch.cuda, "get_per_process_memory_fraction", lambda d: 0.9)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: type("P", (), {"total_memory": 2 ** 30})())
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d: 2 ** 28)
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda f, d: fractions.append(f))
    with _memory_cap(torch.device("cuda"), 256):
        assert fractions == [0.5]  # (256 MiB reserved + 256 MiB) of 1 GiB
    assert fractions == [0.5, 0.9]


def test_a_timed_crossover_is_said_as_measured_once_a_counted_one_as_exact():
    """GFLOPs are counted: 'cheaper from'. A time is measured once per size, with no interval over
    repeated timings: the crossing of its ratio is reported, not read as a direction."""
    from experiments.complexity.tables import _crossover_text
    c = {"global": "DeiT-S", "windowed": "Swin-T", "crossover": 589.4, "from": 224, "to": 1024,
         "ratio_first": 1.38, "ratio_last": 0.62}
    assert _crossover_text({**c, "cost": "GFLOPs"}).startswith("Swin-T vs DeiT-S, GFLOPs: cheaper from resolution 589 ")
    timed = _crossover_text({**c, "cost": "inference ms/image"})
    assert "timed once per size" in timed and "no interval" in timed and "crossed 1 near resolution 589" in timed
    assert "cheaper" not in timed
