"""What a family costs as images grow: throughput (images/s) and peak memory of inference and of a
training step at each input resolution, with log-log slopes and crossovers of the measured curves.

FLOPs are counted elsewhere (modules/complexity.py); this module times and measures memory. A sweep
stops a mode cleanly at the first resolution that runs out of memory, and skips (with the larger
ones) a resolution whose predicted time exceeds a per-point limit, so a fixed time budget holds.

Peak memory is what the timed steps hold at their peak above what was resident after the warm-up:
what grows with the input (activations; in training also the gradients, freed and rebuilt each step),
not the weights or AdamW state, nor one-off allocations of first calls.
  cuda: torch.cuda.max_memory_allocated after reset_peak_memory_stats (tensors only);
  cpu:  VmHWM of /proc/self/status after resetting it (write "5" to /proc/self/clear_refs,
        Linux >= 4.0), minus VmRSS before: the whole process's resident memory, page-granular.
"""
from __future__ import annotations

import ctypes
import gc
import importlib
import math
import re
import resource
import statistics
import sys
import time
from contextlib import contextmanager
from typing import Callable, Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

MODES = ("infer", "train")
OOM = "out of memory"
FIELDS = ("status", "img_s", "step_ms", "peak_mib", "reps", "seconds")  # per mode in a sweep row
MIN_SECONDS = 0.2   # a timed rep repeats the step until it lasts this long: fast steps are timed, not the clock
FALLBACK_SLOPE = 4  # step time ~ resolution^4 (global attention over resolution^2 tokens) until two points fit one
MIN_SLOPE = 2       # a step costs at least its pixel count once past fixed overheads; a flatter measured slope
                    # (overheads at small sizes) would under-predict the next point

try:  # returns freed heap pages to the OS so VmRSS before a point is what is live (glibc only)
    _malloc_trim = ctypes.CDLL("libc.so.6").malloc_trim
except (OSError, AttributeError):
    _malloc_trim = None


def measure_point(model: nn.Module, resolution: int, *, in_chans: int, batch_size: int, device, mode: str,
                  warmup: int = 1, reps: int = 3, min_seconds: float = MIN_SECONDS,
                  memory_limit_mib: float | None = None) -> dict:
    """{mode, status, img_s, step_ms, peak_mib, reps, seconds} of `mode` ("infer" or "train") on random
    (batch_size, in_chans, resolution, resolution) inputs. img_s and step_ms come from the median timed rep;
    status is "ok" or "out of memory" (then img_s, step_ms and peak_mib are None). memory_limit_mib caps what
    the point may allocate beyond what is allocated now (cpu: address space; cuda: the caching allocator)."""
    device = _check_device(device)
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: allowed {', '.join(MODES)}")
    for name, value, low in (("resolution", resolution, 1), ("in_chans", in_chans, 1),
                             ("batch_size", batch_size, 1), ("warmup", warmup, 1), ("reps", reps, 1)):
        if not isinstance(value, int) or value < low:
            raise ValueError(f"{name}={value!r}: must be an integer >= {low}")
    if not min_seconds >= 0:
        raise ValueError(f"min_seconds={min_seconds!r}: must be >= 0")
    result = dict(mode=mode, status="ok", img_s=None, step_ms=None, peak_mib=None, reps=0, seconds=0.0)
    start = time.perf_counter()
    try:
        with _memory_cap(device, memory_limit_mib):
            step_s, peak_mib = _measure(model, resolution, in_chans, batch_size, device, mode,
                                        warmup, reps, min_seconds)
        result.update(img_s=batch_size / step_s, step_ms=1e3 * step_s, peak_mib=peak_mib, reps=reps)
    except (RuntimeError, MemoryError) as e:
        if not _is_oom(e):
            raise
        result["status"] = OOM
    finally:  # _measure's frame (activations, optimizer state) is gone once the exception is cleared
        model.zero_grad(set_to_none=True)
        _free(device)
    result["seconds"] = time.perf_counter() - start
    return result


def sweep_resolutions(label: str, build: Callable[[int], nn.Module], resolutions: Sequence[int], *,
                      in_chans: int, batch_size: int, device, modes: Sequence[str] = MODES,
                      max_point_seconds: float | None = None, memory_limit_mib: float | None = None,
                      cost_hint: Mapping[int, float] | None = None, progress: bool = True,
                      warmup: int = 1, reps: int = 3, min_seconds: float = MIN_SECONDS) -> list[dict]:
    """One row per resolution (ascending): {model, resolution, batch_size, device} and, per mode, the
    measure_point fields prefixed (infer_status, infer_img_s, ..., train_peak_mib, ...).

    `build(resolution)` returns the model already on `device`; it is built once per resolution, under the
    memory cap. A mode that runs out of memory at r (or whose model does) is not run at larger resolutions:
    their status is "out of memory at r". Before each point its seconds are predicted from that mode's
    measured step times: by `cost_hint` (relative cost per resolution, e.g. FLOPs) when it has both
    resolutions, else by the log-log slope of the last two points (at least MIN_SLOPE; FALLBACK_SLOPE with one
    point). A point predicted past max_point_seconds is skipped ("skipped: predicted N s > limit M s") and so
    are the larger ones (the same status, "at r")."""
    device = _check_device(device)
    if not resolutions or any(not isinstance(r, int) or r < 1 for r in resolutions) \
            or list(resolutions) != sorted(set(resolutions)):
        raise ValueError(f"resolutions={list(resolutions)!r}: must be distinct positive integers, ascending")
    if not modes or any(m not in MODES for m in modes):
        raise ValueError(f"modes={list(modes)!r}: allowed a non-empty subset of {', '.join(MODES)}")
    if max_point_seconds is not None and not max_point_seconds > 0:
        raise ValueError(f"max_point_seconds={max_point_seconds!r}: must be > 0 or None")
    measure_kw = dict(in_chans=in_chans, batch_size=batch_size, device=device, warmup=warmup, reps=reps,
                      min_seconds=min_seconds, memory_limit_mib=memory_limit_mib)
    stopped: dict[str, str] = {}                                  # mode -> status every larger point gets
    history: dict[str, list[tuple[int, float]]] = {m: [] for m in modes}  # mode -> [(resolution, step s)]
    rows = []
    for r in resolutions:
        row = dict(model=label, resolution=r, batch_size=batch_size, device=str(device))
        model, built = None, False
        for m in modes:
            step_s = _predict_step(history[m], r, cost_hint)
            predicted = None if step_s is None else warmup * step_s + reps * max(step_s, min_seconds)
            if m in stopped:
                p = _not_run(stopped[m])
            elif max_point_seconds is not None and predicted is not None and predicted > max_point_seconds:
                p = _not_run(f"skipped: predicted {predicted:.3g} s > limit {max_point_seconds:g} s")
            else:
                if not built:
                    model, built = _build(build, r, device, memory_limit_mib), True
                if model is None:
                    p = _not_run(f"{OOM} building the model")
                else:
                    p = measure_point(model, r, mode=m, **measure_kw)
            if m not in stopped:
                if p["status"] == "ok":
                    history[m].append((r, p["step_ms"] / 1e3))
                else:
                    stopped[m] = f"{p['status']} at {r}"
            row.update({f"{m}_{k}": p[k] for k in FIELDS})
            if progress:
                speed = "-" if p["img_s"] is None else f"{p['img_s']:.3g} img/s"
                peak = "-" if p["peak_mib"] is None else f"{p['peak_mib']:.1f} MiB peak"
                print(f"{label} {r}px {m}: {speed}, {peak}, {p['status']}", file=sys.stderr, flush=True)
        del model
        _free(device)
        rows.append(row)
    return rows


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """Least-squares slope of log y on log x (y ~ x^slope) over the points with positive x and y."""
    lx, ly = zip(*_log_points(xs, ys))
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def local_slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The log-log slope between the two largest x: how cost grows where the curve was last measured."""
    (x0, y0), (x1, y1) = _log_points(xs, ys)[-2:]
    return (y1 - y0) / (x1 - x0)


def crossover(xs: Sequence[float], cost_a: Sequence[float], cost_b: Sequence[float]) -> float | None:
    """The smallest x from which b costs no more than a at every larger measured x (e.g. the resolution
    from which windowed attention, b, is cheaper than global attention, a).

    Points where either cost is missing or not positive are left out. Between the last point where b > a
    and the next one, both curves are taken as straight in log-log, so log(b/a) is linear in log x and the
    answer is where it reaches 0. The smallest x if b <= a everywhere; None if b > a at the largest x.
    """
    pts = sorted((x, a, b) for x, a, b in _zip_checked(xs, cost_a, cost_b) if _positive(x, a, b))
    _check_distinct([x for x, _, _ in pts], xs, "a crossover", 1)
    d = [math.log(b / a) for _, a, b in pts]  # <= 0 where b is no more costly
    if d[-1] > 0:
        return None
    k = len(d)  # the first point of the trailing run where b <= a
    while k > 0 and d[k - 1] <= 0:
        k -= 1
    if k == 0:
        return pts[0][0]
    (x0, x1), (d0, d1) = (pts[k - 1][0], pts[k][0]), (d[k - 1], d[k])
    return math.exp(math.log(x0) + (math.log(x1) - math.log(x0)) * d0 / (d0 - d1))


# ---------------- measuring ----------------
def _measure(model, resolution, in_chans, batch_size, device, mode, warmup, reps, min_seconds):
    """(median seconds per step, peak MiB) over `warmup` single steps, then `reps` timed reps of n steps."""
    x = torch.randn(batch_size, in_chans, resolution, resolution, device=device)
    if mode == "infer":
        model.eval()

        def step():
            with torch.inference_mode():
                model(x)
    else:
        model.train()
        num_classes = getattr(model, "num_classes", None)
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"model.num_classes={num_classes!r}: training needs the model's class count")
        y = torch.randint(0, num_classes, (batch_size,), device=device)
        opt = torch.optim.AdamW(model.parameters())

        def step():
            opt.zero_grad(set_to_none=True)
            out = model(x)  # DeiT in training: (cls, dist) logits, both learning the labels (no teacher)
            outs = out if isinstance(out, tuple) else (out,)
            (sum(F.cross_entropy(o, y) for o in outs) / len(outs)).backward()
            opt.step()
    times = []
    for i in range(warmup + reps):
        if i == warmup:  # lazy initialisation, AdamW state and gradients are resident from here
            peak = _PeakMemory(device)
        # n from the fastest step so far, so a rep lasts about min_seconds even after slow first steps
        # (lazy initialisation, worker threads waking on a busy machine)
        n = max(1, math.ceil(min_seconds / min(times))) if len(times) >= warmup else 1
        t = time.perf_counter()
        for _ in range(n):
            step()
        _sync(device)
        times.append((time.perf_counter() - t) / n)
    times = times[warmup:]
    return statistics.median(times), peak.mib()


class _PeakMemory:
    """Peak memory above what is resident when it is created (see the module docstring)."""

    def __init__(self, device: torch.device):
        self.device = device
        _free(device)
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(device)
            self.base = torch.cuda.memory_allocated(device)
            return
        if _malloc_trim is not None:
            _malloc_trim(0)
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to VmRSS
            self.base = _proc_status_kib("VmRSS")
        except OSError:  # no /proc (not Linux), before Linux 4.0, or a sandbox that refuses it: no peak
            self.base = None

    def mib(self) -> float | None:
        if self.device.type == "cuda":
            return (torch.cuda.max_memory_allocated(self.device) - self.base) / 2 ** 20
        return None if self.base is None else (_proc_status_kib("VmHWM") - self.base) / 1024


@contextmanager
def _memory_cap(device: torch.device, limit_mib: float | None):
    """Allocations beyond limit_mib more than now fail as out of memory inside the block (for the whole
    process, every thread); restored after.
    cpu: RLIMIT_AS = VmSize + limit (glibc's malloc and mmap then fail with ENOMEM, which PyTorch raises as
    "DefaultCPUAllocator: can't allocate memory", numpy as MemoryError); cuda: the allocator's memory fraction."""
    if limit_mib is None:
        yield
        return
    if not limit_mib > 0:
        raise ValueError(f"memory_limit_mib={limit_mib!r}: must be > 0 or None")
    if device.type == "cuda":
        previous = torch.cuda.get_per_process_memory_fraction(device)
        total = torch.cuda.get_device_properties(device).total_memory
        torch.cuda.set_per_process_memory_fraction(
            min(1.0, (torch.cuda.memory_reserved(device) + limit_mib * 2 ** 20) / total), device)
        try:
            yield
        finally:
            torch.cuda.set_per_process_memory_fraction(previous, device)
        return
    # The first optimizer imports torch._dynamo; under the cap the libraries it maps would count and the
    # import would fail half-way, so it is imported before (by name: an `import torch._dynamo` here would
    # make `torch` a local of this function, unbound on the cuda path above).
    importlib.import_module("torch._dynamo")
    previous = resource.getrlimit(resource.RLIMIT_AS)
    soft = (_proc_status_kib("VmSize") + int(limit_mib * 1024)) * 1024
    if previous[1] != resource.RLIM_INFINITY:
        soft = min(soft, previous[1])
    resource.setrlimit(resource.RLIMIT_AS, (soft, previous[1]))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, previous)


def _build(build, resolution, device, limit_mib) -> nn.Module | None:
    """build(resolution), or None when it runs out of memory."""
    try:
        with _memory_cap(device, limit_mib):
            return build(resolution)
    except (RuntimeError, MemoryError) as e:
        if not _is_oom(e):
            raise
    _free(device)
    return None


def _predict_step(history: list[tuple[int, float]], resolution: int, cost_hint) -> float | None:
    """Seconds per step at `resolution` from [(resolution, seconds per step)] measured below it; None without any."""
    if not history:
        return None
    r1, t1 = history[-1]
    if cost_hint and resolution in cost_hint and r1 in cost_hint and cost_hint[r1] > 0:
        return t1 * cost_hint[resolution] / cost_hint[r1]
    slope = FALLBACK_SLOPE if len(history) < 2 else max(MIN_SLOPE, local_slope(*zip(*history[-2:])))
    return t1 * (resolution / r1) ** slope


def _is_oom(e: BaseException) -> bool:
    return isinstance(e, (MemoryError, torch.cuda.OutOfMemoryError)) or \
        "can't allocate memory" in str(e) or "DefaultCPUAllocator" in str(e)


def _not_run(status: str) -> dict:
    return dict(status=status, img_s=None, step_ms=None, peak_mib=None, reps=0, seconds=0.0)


def _check_device(device) -> torch.device:
    device = torch.device(device)
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device={str(device)!r}: allowed cpu or cuda")
    return device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def _proc_status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


# ---------------- fitting ----------------
def _positive(*values) -> bool:
    return all(v is not None and math.isfinite(v) and v > 0 for v in values)


def _zip_checked(*columns):
    if len({len(c) for c in columns}) != 1:
        raise ValueError(f"lengths {[len(c) for c in columns]} differ: every x needs one value per curve")
    return zip(*columns)


def _log_points(xs, ys) -> list[tuple[float, float]]:
    """(log x, log y) sorted by x over the points with positive x and y (>= 2, at distinct x)."""
    pts = sorted((math.log(x), math.log(y)) for x, y in _zip_checked(xs, ys) if _positive(x, y))
    _check_distinct([x for x, _ in pts], xs, "a slope", 2)
    return pts


def _check_distinct(valid_xs: list[float], xs, what: str, least: int) -> None:
    if len(valid_xs) < least or len(set(valid_xs)) < len(valid_xs):
        raise ValueError(f"xs={list(xs)!r}: {what} needs >= {least} points with positive values, at distinct x")
