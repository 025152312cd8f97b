"""results/complexity.{md,csv}, complexity_scaling.csv, complexity_interpolation.csv and the plots,
regenerated from <runs_dir>/complexity/measurements_<profile>.json alone (written by
`python -m experiments complexity`). Slopes are of log cost against log resolution: a cost linear
in the number of patches grows as resolution^2, global attention's N^2 term as resolution^4.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from experiments.complexity.runner import PARTS
from experiments.complexity.pos_embed_interpolation import NATIVE
from experiments.runs.sweep.reference import NothingFinished, whose, whose_runs
from experiments.report.verdicts import MARGINS, STILL_IMPROVING, marked_runs
from experiments.report.records import read_record, read_runs
from experiments.runs.run.convergence import still_improving
from experiments.complexity.resolution_scaling import crossover, local_slope, loglog_slope
from experiments.complexity.paper_models import PAPER_MODELS
from experiments.report.findings import Finding
from experiments.statistics import ols_slope
from experiments.figures import log_figures, pyplot, save_png
from experiments.report.table_format import write_csv

MEASUREMENTS = "measurements_*.json"
NAME = "complexity"
GROUPS = (("scaling", "Paper-scale models"), ("ours", "The suite's families"))
MODES = (("infer", "inference"), ("train", "training"))


def _num(v, fmt: str = "{:,.2f}") -> str:
    return "" if v is None else fmt.format(v)


def _rel(v) -> str:
    return "" if v is None else f"{v:+.2%}"


def _provenance_line(part: str, result: dict) -> str:
    p = result["provenance"]
    vers = ", ".join(f"{k} {v}" for k, v in p["versions"].items() if k in ("python", "torch", "timm", "lightning"))
    return (f"- {part}: {p['seconds']:.0f} s on {p['hardware']} ({p['device']}, {p['threads']} threads), "
            f"{vers}, commit {p['commit']}, {p['date']}")


# ---------------- resolution scaling ----------------
def scaling_points(group: dict) -> list[dict]:
    """One row per (model, resolution): FLOPs (every counted resolution) joined with the timing."""
    rows = []
    for m in group["models"]:
        timed = {t["resolution"]: t for t in m["timing"]}
        for f in m["flops"]:
            t = timed.get(f["resolution"], {})
            row = {"model": m["model"], "resolution": f["resolution"], "gflops": f["gflops"],
                   "attention_gflops": f["attention_gflops"], "batch_size": group["batch_size"]}
            for mode, _ in MODES:
                row[f"{mode}_img_s"] = t.get(f"{mode}_img_s")
                row[f"{mode}_peak_mib"] = t.get(f"{mode}_peak_mib")
                row[f"{mode}_status"] = t.get(f"{mode}_status")  # None: FLOPs counted, not timed
            rows.append(row)
    return rows


def _ok(rows: list[dict], key: str) -> tuple[list[float], list[float]]:
    pts = [(r["resolution"], r[key]) for r in rows if r.get(key) not in (None, 0)]
    return [p[0] for p in pts], [p[1] for p in pts]


def _ms_per_image(rows: list[dict], mode: str) -> tuple[list[float], list[float]]:
    xs, ys = _ok(rows, f"{mode}_img_s")
    return xs, [1000.0 / y for y in ys]


# local exponents all within 2 +- this read "linear" in the patches, within 4 +- it "quadratic"
EXPONENT_MARGIN = MARGINS["resolution exponent"].value


def window_alignment(model: str) -> int | None:
    """The input size whose patch grid a windowed paper model's windows tile at every stage without
    padding (Swin: patch x 2^3 mergings x window = 224 for patch 4, window 7); None without windows.
    The suite's own Swin needs none: its window divides every stage grid by construction."""
    timm_name = next((m.timm_name for m in PAPER_MODELS if m.label == model), "")
    found = re.search(r"patch(\d+)_window(\d+)", timm_name)
    return int(found[1]) * 8 * int(found[2]) if found else None


@dataclass(frozen=True)
class Exponent:
    """cost ∝ resolution^k over `sizes`: k by least squares of log cost on log resolution, and the
    local exponents between neighbouring sizes, lowest and highest. FLOPs are counted, not sampled:
    the local range says how far the curve bends over the sizes, it is not an uncertainty."""
    k: float
    local_low: float
    local_high: float
    sizes: list[float]


def exponent(model: str, xs: list[float], ys: list[float]) -> Exponent | None:
    """The exponent over the top half of the range (sizes >= half the largest, at least the three
    largest), or, for a windowed model, over its window-aligned sizes only, so that window padding
    does not bend it; None with fewer than 2 such sizes."""
    align = window_alignment(model)
    if align:
        pts = sorted((x, y) for x, y in zip(xs, ys) if x % align == 0)
    else:
        top = sorted(xs)[-3:]
        pts = sorted((x, y) for x, y in zip(xs, ys) if x >= max(xs) / 2 or x in top)
    if len(pts) < 2:
        return None
    logs = [(math.log(x), math.log(y)) for x, y in pts]
    local = [(b[1] - a[1]) / (b[0] - a[0]) for a, b in zip(logs, logs[1:])]
    fit = ols_slope([lx for lx, _ in logs], [ly for _, ly in logs])
    return Exponent(fit.value, min(local), max(local), [x for x, _ in pts])


def regime(e: Exponent | None) -> str:
    """The growth read from every local exponent: linear (2) or quadratic (4) in the patches only
    where all lie within EXPONENT_MARGIN of it; in between where all lie between."""
    if e is None or len(e.sizes) < 3:
        return "cannot tell: fewer than 3 sizes, so no bend can be seen"
    lo, hi = e.local_low, e.local_high
    for k, name in ((2, "linear in the patches"), (4, "quadratic in the patches")):
        if k - EXPONENT_MARGIN <= lo and hi <= k + EXPONENT_MARGIN:
            return name
    if 2 + EXPONENT_MARGIN < lo and hi < 4 - EXPONENT_MARGIN:
        return "between linear and quadratic"
    return (f"cannot tell: its local exponents {lo:.2f} to {hi:.2f} are not all within ±{EXPONENT_MARGIN} of 2 or 4 "
            "nor all between them")


def _exponent_words(e: Exponent) -> str:
    return f"{e.k:.2f}" + ("" if len(e.sizes) < 3 else f", local {e.local_low:.2f} to {e.local_high:.2f}")


def slopes(points: list[dict]) -> list[dict]:
    """Per model and cost: the OLS slope over every point and the slope between the two largest."""
    out = []
    for model in dict.fromkeys(r["model"] for r in points):
        rows = [r for r in points if r["model"] == model]
        costs = {"GFLOPs": _ok(rows, "gflops"), "training ms/image": _ms_per_image(rows, "train"),
                 "inference ms/image": _ms_per_image(rows, "infer"), "training peak MiB": _ok(rows, "train_peak_mib")}
        for cost, (xs, ys) in costs.items():
            if len(xs) >= 2:
                fit = exponent(model, xs, ys)
                out.append({"model": model, "cost": cost, "slope": loglog_slope(xs, ys), "end_slope": local_slope(xs, ys),
                            "from": min(xs), "to": max(xs), "points": len(xs), "exponent": fit,
                            "aligned_to": window_alignment(model), "ends": sorted(xs)[-2:]})
    return out


def crossovers(points: list[dict], pairs: list[list[str]]) -> list[dict]:
    """For each [global, windowed] pair: the resolution from which the windowed model is cheaper."""
    out = []
    for a, b in pairs:
        ra, rb = [r for r in points if r["model"] == a], [r for r in points if r["model"] == b]
        for cost, get in (("GFLOPs", lambda rows: _ok(rows, "gflops")),
                          ("inference ms/image", lambda rows: _ms_per_image(rows, "infer")),
                          ("training ms/image", lambda rows: _ms_per_image(rows, "train"))):
            xa, ya = get(ra)
            xb, yb = get(rb)
            common = sorted(set(xa) & set(xb))
            if not common:
                continue
            ca = [ya[xa.index(x)] for x in common]
            cb = [yb[xb.index(x)] for x in common]
            out.append({"global": a, "windowed": b, "cost": cost, "crossover": crossover(common, ca, cb),
                        "from": common[0], "to": common[-1],
                        "ratio_first": cb[0] / ca[0], "ratio_last": cb[-1] / ca[-1]})
    return out


def _crossover_text(c: dict) -> str:
    """GFLOPs are counted, so where the window model becomes cheaper is exact; a time is measured once
    per size (the median of a few reps in one process), with no interval over repeated timings, so
    the crossing is said as where the measured ratio crossed 1, not as a direction read."""
    ratio = f"{c['windowed']}/{c['global']}"
    if c["cost"] == "GFLOPs":
        where = (f"cheaper from resolution {c['crossover']:.0f}" if c["crossover"] is not None
                 and c["crossover"] > c["from"] else f"cheaper at every measured resolution ({c['from']}-{c['to']})"
                 if c["crossover"] is not None else f"not cheaper by {c['to']}")
    else:
        where = (f"timed once per size (the median of a few reps in one process: no interval over repeated timings), the ratio {ratio} crossed 1 near "
                 f"resolution {c['crossover']:.0f}" if c["crossover"] is not None and c["crossover"] > c["from"]
                 else f"timed once per size (the median of a few reps in one process: no interval over repeated timings), below 1 at every measured resolution "
                 f"({c['from']}-{c['to']})" if c["crossover"] is not None
                 else f"timed once per size (the median of a few reps in one process: no interval over repeated timings), not below 1 by {c['to']}")
    return (f"{c['windowed']} vs {c['global']}, {c['cost']}: {where} "
            f"(ratio {ratio} {c['ratio_first']:.2f} at {c['from']}, {c['ratio_last']:.2f} at {c['to']})")


def plot_scaling(points: list[dict], slope_rows: list[dict], title: str, path: Path) -> "Figure":
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    by = {(s["model"], s["cost"]): s["end_slope"] for s in slope_rows}
    panels = (("GFLOPs", "forward GFLOPs / image"), ("training ms/image", "ms per image (train solid, infer dashed)"),
              ("training peak MiB", "peak training activation memory (MiB)"))
    for ax, (cost, ylabel) in zip(axes, panels):
        for i, model in enumerate(dict.fromkeys(r["model"] for r in points)):
            rows = [r for r in points if r["model"] == model]
            color = f"C{i}"
            xs, ys = {"GFLOPs": lambda: _ok(rows, "gflops"), "training ms/image": lambda: _ms_per_image(rows, "train"),
                      "training peak MiB": lambda: _ok(rows, "train_peak_mib")}[cost]()
            if xs:
                s = by.get((model, cost))
                ax.plot(xs, ys, "o-", color=color, label=f"{model}" + (f" (end slope {s:.1f})" if s is not None else ""))
            if cost == "training ms/image":
                xi, yi = _ms_per_image(rows, "infer")
                ax.plot(xi, yi, "o--", color=color, alpha=0.6)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("input resolution (pixels per side)")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(title + ": log-log; slope 2 = linear in patches, 4 = quadratic")
    fig.tight_layout()
    save_png(fig, path)
    return fig  # for TensorBoard, which closes it (log_figures)


def _status_cell(r: dict, mode: str) -> str:
    status = r.get(f"{mode}_status")
    if status == "ok":
        return _num(r[f"{mode}_img_s"], "{:,.1f}")
    return status or "not timed"


SLOPE_COSTS = ("GFLOPs", "training ms/image", "inference ms/image", "training peak MiB")


def _slope_table(slope_rows: list[dict]) -> list[str]:
    lines = ["| model | " + " | ".join(SLOPE_COSTS) + " | GFLOPs exponent k, local range, fitted sizes | read |",
             "|---|" + "---:|" * len(SLOPE_COSTS) + "---:|---|"]
    by = {(r["model"], r["cost"]): r for r in slope_rows}
    for model in dict.fromkeys(r["model"] for r in slope_rows):
        cells = [f"{by[model, c]['slope']:.2f} / {by[model, c]['end_slope']:.2f} ({by[model, c]['from']}-"
                 f"{by[model, c]['to']})" if (model, c) in by else "" for c in SLOPE_COSTS]
        f = by.get((model, "GFLOPs"))
        fit = "" if f is None or f["exponent"] is None else \
            (_exponent_words(f["exponent"]) + f"; {', '.join(map(str, f['exponent'].sizes))}"
             + (" (window-aligned)" if f["aligned_to"] else ""))
        lines.append(f"| {model} | " + " | ".join(cells) + f" | {fit} | {regime(f['exponent']) if f else ''} |")
    return lines


def _exponent_text(r: dict) -> str:
    e = r["exponent"]
    if e is None:
        return "?"
    which = (f"its window-aligned sizes {', '.join(map(str, e.sizes))}" if r["aligned_to"]
             else f"{min(e.sizes)}-{max(e.sizes)} px, the top of its range")
    return f"{_exponent_words(e)} (fitted over {which})"


def _padding(r: dict) -> str:
    """Names the window padding inside the two largest sizes, where there is some."""
    a = r["aligned_to"]
    padded = [x for x in r["ends"] if a and x % a]
    return (f" (at {', '.join(map(str, padded))} px its windows pad the patch grid: sizes not multiples of {a})"
            if padded else "")


def reading(points: list[dict], slope_rows: list[dict], cross: list[dict]) -> list[str]:
    """Generated from the numbers: each model's growth regime and its attention share."""
    out = []
    ends = {(r["model"], r["cost"]): r for r in slope_rows}
    for model in dict.fromkeys(r["model"] for r in points):
        rows = [r for r in points if r["model"] == model and r["gflops"]]
        f = ends.get((model, "GFLOPs"))
        t = ends.get((model, "training ms/image"))
        if f is None:
            continue
        share = f"attention {rows[0]['attention_gflops'] / rows[0]['gflops']:.0%} of its FLOPs at {rows[0]['resolution']}, " \
                f"{rows[-1]['attention_gflops'] / rows[-1]['gflops']:.0%} at {rows[-1]['resolution']}"
        timed = (f"; measured training time per image: slope {t['end_slope']:.2f} over its two largest timed sizes "
                 f"(up to {t['to']})") if t else "; training not timed at two sizes"
        out.append(f"- {model}: FLOPs grow as resolution^{_exponent_text(f)} ({regime(f['exponent'])}; "
                   f"{share}); between its two largest sizes, resolution^{f['end_slope']:.2f}{_padding(f)}{timed}.")
    return out + [f"- {_crossover_text(c)}." for c in cross]


def render_group(key: str, title: str, group: dict, png: str) -> list[str]:
    points = scaling_points(group)
    slope_rows, cross = slopes(points), crossovers(points, group["crossover"])
    lines = [f"### {title}: cost against resolution", "",
             f"Batch {group['batch_size']}" + (f", budget {group['budget']}" if "budget" in group else "")
             + ". Slopes of log cost against log resolution: 2 = linear in the number of patches, 4 = quadratic "
               "(global attention's N² term). What the numbers say:", ""]
    lines += reading(points, slope_rows, cross)
    lines += ["", f"![{title}]({png})", "", "Slopes, all points / the two largest (resolutions):", ""]
    lines += _slope_table(slope_rows)
    lines += ["", "Images/s are medians over timed steps. Peak MiB is the memory the timed steps added above the "
              "resident model: activations (and gradients when training); weights, optimizer state and one-off "
              "first-call allocations are not in it (CUDA: max allocated; CPU: the peak resident set). FLOPs of "
              "further sizes are in the csv and the plot.", "",
              "| model | res | GFLOPs | attention share | infer img/s | train img/s | infer peak MiB | train peak MiB |",
              "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in points:
        if r["infer_status"] is None and r["train_status"] is None:
            continue  # FLOPs only
        share = r["attention_gflops"] / r["gflops"] if r["gflops"] else 0.0
        lines.append(f"| {r['model']} | {r['resolution']} | {_num(r['gflops'])} | {share:.1%} | "
                     f"{_status_cell(r, 'infer')} | {_status_cell(r, 'train')} | "
                     f"{_num(r['infer_peak_mib'], '{:,.0f}')} | {_num(r['train_peak_mib'], '{:,.0f}')} |")
    return lines + [""]


# ---------------- the paper-scale table and the seeds' figures ----------------
def render_paper(paper: dict) -> list[str]:
    lines = [f"### Paper-scale models at {paper['image_size']}x{paper['image_size']} (timm, built without weights)", "",
             "FLOPs = 2 x multiply-adds, attention's q·kᵀ and attn·v included, counted by torch's FlopCounterMode "
             "on the meta device. Published: " + paper["published_source"] + ".", "",
             "| model | timm name | params (M) | published | Δ | GMACs | published | Δ | GFLOPs | attention GFLOPs |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for m in paper["models"]:
        lines.append(f"| {m['label']} | `{m['timm_name']}` | {m['params_m']:.2f} | {_num(m['published_params_m'])} | "
                     f"{_rel(m['params_rel_diff'])} | {m['gmacs']:.2f} | {_num(m['published_gmacs'])} | "
                     f"{_rel(m['gmacs_rel_diff'])} | {m['gflops']:.2f} | {m['attention_gflops']:.2f} |")
    # timm publishes its figures at 224 only: at another paper_image_size there is nothing to differ from
    diffs = [abs(d) for m in paper["models"] for d in (m["params_rel_diff"], m["gmacs_rel_diff"]) if d is not None]
    lines += ["", (f"Largest difference to timm's published figures: {max(diffs):.2%}." if diffs else
                   "timm's published figures are for 224x224: no difference to read at this size."), "",
              "#### The source article's figures (its ViT configuration table and FLOP formula)", "",
              "| claim | claimed | article's formula, one layer | x depth | measured GMACs | measured GFLOPs | verdict |",
              "|---|---:|---:|---:|---:|---:|---|"]
    for c in paper["seed_claims"]:
        lines.append(f"| {c['claim']} | {_num(c['claimed_g'])} | {_num(c.get('formula_layer_g'))} | "
                     f"{_num(c.get('formula_model_g'))} | {_num(c['measured_gmacs'])} | {_num(c['measured_gflops'])} | "
                     f"{c['verdict']} |")
    return lines + [""]


# ---------------- position-embedding interpolation ----------------
INTERPOLATION_COLUMNS = ("method", "phase", "resolution", "val_acc", "test_acc", "val_images", "test_images",
                         "finetune_steps")


def render_interpolation(part: dict, source_run=None) -> list[str]:
    """The study's table; `source_run`: the source run's record (a Summary), whose numbers and the
    study's are marked † where it was still improving, or had too few validations to tell (None: it
    is not among the runs read, and the report says so)."""
    rows = part["rows"]
    source = next(r for r in rows if r["phase"] == "source")
    improving = source_run is not None and still_improving(source_run)
    mark = f" {STILL_IMPROVING}" if improving else ""
    lines = ["### Resolution change by position-embedding interpolation (ViT paper Sec. 3.2)", "",
             f"Source: run `{part['source_run']}` (trained by the suite at {source['resolution']}x{source['resolution']}), "
             f"val {source['val_acc']:.4f}{mark}, test {source['test_acc']:.4f}{mark} at its own size "
             f"({source['val_images']:,} / {source['test_images']:,} images). At {part['target_size']}x{part['target_size']} "
             f"the patch stays, so the grid doubles per side; the position table is resized by each method, then "
             f"fine-tuned {part['finetune_steps']} steps (AdamW, lr {part['lr']:g}, batch {part['batch_size']}; the same "
             "batches for every method; nothing is chosen on either split).", "",
             "| method | val before | test before | val after fine-tune | test after fine-tune |", "|---|---:|---:|---:|---:|"]
    for method in dict.fromkeys(r["method"] for r in rows if r["phase"] != "source"):
        before = next(r for r in rows if r["method"] == method and r["phase"] == "before fine-tune")
        after = next((r for r in rows if r["method"] == method and r["phase"] == "after fine-tune"), None)
        label = f"{method} (control: fine-tuned at {before['resolution']}, no resize)" if method == NATIVE else \
            f"{method}, at {before['resolution']}"
        lines.append(f"| {label} | {before['val_acc']:.4f} | {before['test_acc']:.4f} | "
                     f"{_num(after and after['val_acc'], '{:.4f}')} | {_num(after and after['test_acc'], '{:.4f}')} |")
    half = 1.96 * math.sqrt(0.25 / source["test_images"])
    lines += ["", f"One seed; a binomial 95% interval on {source['test_images']:,} test images is at most ±{half:.3f}: "
              "the methods are shown side by side, not compared (that takes three seeds at least).", ""]
    if source_run is None:
        lines += ["The source run's record is not among the runs read, so whether it plateaued is not known: "
                  "the numbers are shown, and no conclusion is drawn from them.", ""]
    elif improving:
        lines += [f"Every number of this study rests on its source run, marked {STILL_IMPROVING} (not known to have "
                  "plateaued): the numbers are shown, and no conclusion is drawn from them.", ""]
        for paragraph in marked_runs([(part["source_run"], source_run)]):
            lines += [*paragraph, ""]
    return lines


def source_summary(exp_dir: Path, part: dict):
    """The interpolation study's source run's record: the run of exp_dir (records.read_runs: its own
    folders, named as the record names them) that the study names; None where it names none of them."""
    name = part.get("source_run")
    run = read_runs(exp_dir)[0].get(name) if isinstance(name, str) else None
    return run.summary if run is not None else None


# ---------------- files ----------------
def findings(exp_dir: Path) -> list[Finding]:
    """The ViT paper's cost claim as measured here: global attention makes a ViT's FLOPs grow with
    the square of its patches (resolution^4) once attention dominates, Swin's windows keep them
    linear in the patches (resolution^2). FLOPs are counted, not sampled: no interval."""
    out = []
    for path in sorted(Path(exp_dir).glob(MEASUREMENTS)):
        rec = read_record(path)
        group = rec["parts"].get("scaling")
        if not group:
            continue
        ends = {r["model"]: r for r in slopes(scaling_points(group)) if r["cost"] == "GFLOPs"}
        said = "; ".join(f"{m} {_exponent_text(r)}" for m, r in ends.items())
        words = "; ".join(f"{m} {regime(r['exponent'])}" for m, r in ends.items())
        prov = rec["parts"]["scaling"].get("provenance", {})
        out.append(Finding("How fast does compute grow with resolution?",
                           "ViT: attention is quadratic in the patches (resolution^4 once it dominates); "
                           "Swin: linear in the patches (resolution^2) (ViT Sec. 3, Swin Sec. 3.2)",
                           f"FLOPs ∝ resolution^k, k fitted by least squares, and the local k between "
                           f"neighbouring sizes (FLOPs are counted: no interval): {said}",
                           f"{words} (read from every local k: within ±{EXPONENT_MARGIN} of 2 or 4, or between)",
                           f"[complexity](results/complexity.md) {rec['profile']}; {prov.get('hardware', '?')}; "
                           f"commit {prov.get('commit', '?')}; {whose(Path(exp_dir))}"))
    return out


def make_tables(exp_dir: Path, out_dir: Path) -> list[Path]:
    """Every profile's record (cpu first) into one markdown file; csv rows carry the profile."""
    records = [read_record(path) for path in sorted(Path(exp_dir).glob(MEASUREMENTS))]
    if not records:
        raise NothingFinished(f"no measurements in {exp_dir}: run `make exp-complexity` first")
    out_dir.mkdir(parents=True, exist_ok=True)
    head = [f"# {NAME}", "", "What each family costs as images grow. Regenerated by `make tables` from "
            f"{Path(exp_dir).as_posix()}/{MEASUREMENTS} (measured by `make exp-complexity`).",
            whose_runs(Path(exp_dir)), ""]
    text = list(head)
    paper_rows, scaling_rows, interp_rows, paths = [], [], [], []
    for rec in records:
        prof, parts, figs = rec["profile"], rec["parts"], {}
        total = sum(parts[k]["provenance"]["seconds"] for k in parts)
        lines = [f"## Profile {prof}", "", f"Measured ({total / 60:.1f} minutes in all):"] \
            + [_provenance_line(k, parts[k]) for k in PARTS if k in parts] + [""]
        text += lines
        if "paper" in parts:
            text += render_paper(parts["paper"])
            paper_rows += [{"profile": prof, **m} for m in parts["paper"]["models"]]
        for key, title in GROUPS:
            if key in parts:
                png = f"{NAME}_{key}_{prof}.png"
                points = scaling_points(parts[key])
                figs[key] = plot_scaling(points, slopes(points), f"{title} ({prof})", out_dir / png)
                paths.append(out_dir / png)
                text += render_group(key, title, parts[key], png)
                scaling_rows += [{"profile": prof, "group": key, **r} for r in points]
        log_figures(figs, Path(exp_dir) / "tensorboard" / prof, NAME)
        if "interpolation" in parts:
            text += render_interpolation(parts["interpolation"], source_summary(Path(exp_dir), parts["interpolation"]))
            interp_rows += [{"profile": prof, **r} for r in parts["interpolation"]["rows"]]
    md = out_dir / f"{NAME}.md"
    md.write_text("\n".join(text).rstrip() + "\n")
    paths.insert(0, md)
    for suffix, rows in (("", paper_rows), ("_scaling", scaling_rows), ("_interpolation", interp_rows)):
        path = out_dir / f"{NAME}{suffix}.csv"
        if rows:
            write_csv(path, rows, list(dict.fromkeys(k for r in rows for k in r)))
            paths.append(path)
    return paths
