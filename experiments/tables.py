"""`python -m experiments tables`: results/<experiment>.{csv,md,png} regenerated from run folders.

Reads only results/runs/<experiment>/*/{summary,identity}.json (and the sweep.json the runner
leaves), so a fresh clone regenerates the committed tables and plot byte for byte. A row is one
configuration over its seeds: runs are grouped by every setting of their identity except the
seed, and the settings that differ between rows are shown in a `settings` column.
"""
from __future__ import annotations

import argparse
import csv
import json
import statistics
from collections import defaultdict
from pathlib import Path

from modules import FAMILIES

from .run_record import read_identity, read_summary

SEED_KEYS = ("seed_everything", "data.seed")   # what varies within a row
AXIS_KEYS = ("model.family", "data.fraction", "data.train_size")  # shown in their own columns
SHOWN_COMMON = ("data.dataset", "model.budget", "data.batch_size", "trainer.max_steps", "trainer.max_epochs",
                "trainer.val_check_interval", "trainer.check_val_every_n_epoch", "model.lr", "model.weight_decay",
                "trainer.precision")
COLUMNS = ("family", "settings", "fraction", "train_size", "test_acc_mean", "test_acc_std", "seeds",
           "params", "flops_per_image", "images_per_sec", "wall_time_s", "config_hashes")
README = Path("README.md")  # its block between <!-- tables:NAME --> and <!-- /tables:NAME --> is regenerated


def collect(exp_dir: Path) -> list[dict]:
    """Each run folder's summary, with its identity (the settings its folder hash covers) under
    'identity' when the folder has one."""
    out = []
    for d in sorted(Path(exp_dir).iterdir()):
        if d.is_dir() and (s := read_summary(d)):
            ident = read_identity(d)
            out.append({**s, "identity": grouping_identity(ident)} if ident is not None else s)
    return out


def grouping_identity(ident: dict) -> dict:
    """The identity without the seed; a DeiT teacher is named by its family-budget (its own
    fraction and seed follow the student's)."""
    out = {k: v for k, v in ident.items() if k not in SEED_KEYS}
    if out.get("model.teacher_checkpoint"):
        out["model.teacher_checkpoint"] = Path(out["model.teacher_checkpoint"]).parent.parent.name.split("_")[0]
    return out


def _key(ident: dict) -> str:
    return json.dumps(ident, sort_keys=True)


def varying_settings(summaries: list[dict]) -> list[str]:
    """Identity keys (other than the seed and the row axes) whose values differ between runs of
    one family (a DeiT teacher is not a difference from a ResNet)."""
    keys = set()
    for family in {s.get("family") for s in summaries}:
        keys |= set(_varying([s["identity"] for s in summaries if "identity" in s and s.get("family") == family]))
    return sorted(keys)


def _varying(idents: list[dict]) -> list[str]:
    keys = sorted({k for i in idents for k in i} - set(AXIS_KEYS))
    return [k for k in keys if len({json.dumps(i.get(k)) for i in idents}) > 1]


def settings_label(ident: dict, keys: list[str]) -> str:
    return ", ".join(f"{k.split('.', 1)[-1]}={_fmt(ident.get(k))}" for k in keys)


def _fmt(v) -> str:
    return f"{v:g}" if isinstance(v, float) else str(v)


def aggregate(summaries: list[dict]) -> list[dict]:
    """One row per configuration over its finished seeds: mean and sample standard deviation of
    test accuracy (0 with one seed). Runs without an identity group by family and fraction."""
    done = [s for s in summaries if s.get("status") == "done" and s.get("test_acc") is not None]
    keys = {f: varying_settings([s for s in done if s["family"] == f]) for f in {s["family"] for s in done}}
    groups = defaultdict(list)
    for s in done:
        ident = s.get("identity") or {"model.family": s["family"], "data.fraction": float(s["fraction"])}
        groups[_key(ident)].append(s)
    rows = []
    for runs in groups.values():
        accs = [r["test_acc"] for r in runs]
        first = runs[0]
        rows.append({"family": first["family"], "settings": settings_label(first.get("identity", {}), keys[first["family"]]),
                     "fraction": float(first["fraction"]), "train_size": first["train_size"],
                     "test_acc_mean": statistics.fmean(accs),
                     "test_acc_std": statistics.stdev(accs) if len(accs) > 1 else 0.0, "seeds": len(accs),
                     "params": first["params"], "flops_per_image": first["flops_per_image"],
                     "images_per_sec": round(statistics.fmean(r.get("images_per_sec") or 0 for r in runs)),
                     "wall_time_s": round(statistics.fmean(r.get("wall_time_s") or 0 for r in runs)),
                     "config_hashes": " ".join(sorted({r.get("config_hash") or "" for r in runs}))})
    order = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(rows, key=lambda r: (order.get(r["family"], 99), r["settings"], r["fraction"]))


def sample_efficiency(rows: list[dict], threshold: float) -> dict[tuple[str, str], int | None]:
    """Smallest training set whose mean test accuracy reaches `threshold` (None: never)."""
    out = {}
    for r in rows:
        key = (r["family"], r["settings"])
        out.setdefault(key, None)
        if r["test_acc_mean"] >= threshold and (out[key] is None or r["train_size"] < out[key]):
            out[key] = r["train_size"]
    return out


def write_csv(rows: list[dict], path: Path) -> None:
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({**r, "test_acc_mean": f"{r['test_acc_mean']:.4f}", "test_acc_std": f"{r['test_acc_std']:.4f}"})


def _provenance(summaries: list[dict]) -> list[str]:
    def values(key):
        return sorted({json.dumps(s[key], sort_keys=True) if isinstance(s.get(key), dict) else str(s.get(key))
                       for s in summaries if s.get(key) is not None})
    lines = [f"- hardware: {'; '.join(values('hardware'))}",
             f"- code: commit {', '.join(values('commit'))}"]
    for v in values("versions"):
        lines.append("- versions: " + ", ".join(f"{k} {x}" for k, x in json.loads(v).items()))
    return lines


def _common_settings(summaries: list[dict]) -> str:
    """The settings every run of the table shares, of those a reader needs to place it."""
    idents = [s["identity"] for s in summaries if "identity" in s]
    shown = []
    for k in SHOWN_COMMON:
        vals = {json.dumps(i.get(k)) for i in idents}
        if idents and len(vals) == 1 and idents[0].get(k) not in (None, -1):
            shown.append(f"{k.split('.', 1)[1]} {_fmt(idents[0][k])}")
    seeds = sorted({s.get("seed") for s in summaries if s.get("seed") is not None})
    return ", ".join(shown) + f"; seeds {seeds}"


def _family_settings(summaries: list[dict]) -> list[str]:
    """Shown settings that differ between families but not within one (e.g. a precision that
    depended on the machine a family was rerun on)."""
    families = list(dict.fromkeys(s["family"] for s in summaries if "identity" in s))
    out = []
    for k in SHOWN_COMMON:
        values = {f: {json.dumps(s["identity"].get(k)) for s in summaries if s.get("family") == f and "identity" in s}
                  for f in families}
        if all(len(v) == 1 for v in values.values()) and len({next(iter(v)) for v in values.values()}) > 1:
            by_value = defaultdict(list)
            for f, v in values.items():
                by_value[json.loads(next(iter(v)))].append(f)
            out.append(f"{k.split('.', 1)[1]} " + "; ".join(f"{_fmt(v)} ({', '.join(fs)})" for v, fs in by_value.items()))
    return out


def render_markdown(name: str, rows, summaries, sweep: dict, plot: Path | None) -> str:
    threshold = _threshold(sweep)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    with_settings = any(settings)
    wall = sum(s.get("wall_time_s") or 0 for s in summaries)
    out = [f"# {name}: test accuracy against training-set size", "",
           f"Generated by `make tables` from results/runs/{name}/*/summary.json; do not edit by hand.", "",
           f"- every run: {_common_settings(summaries)}"]
    by_family = _family_settings(summaries)
    if by_family:
        out.append(f"- by family: {'; '.join(by_family)}")
    keys = varying_settings([s for s in summaries if s.get("status") == "done"])
    if keys:
        out.append(f"- settings that differ between rows: {', '.join(keys)} (never averaged together)")
    statuses = defaultdict(int)
    for s in summaries:
        statuses[s.get("status")] += 1
    out.append(f"- runs: {len(summaries)} ({', '.join(f'{n} {k}' for k, n in sorted(statuses.items()))}); "
               f"wall time summed over runs (fit only): {wall / 60:.1f} min")
    for profile, rec in sorted((sweep.get("profiles") or {}).items()):
        last = rec.get("last_invocation")
        if last:
            out.append(f"- the last `sweep --profile {profile}` invocation ran {last['runs']} runs in "
                       f"{last['wall_time_s'] / 60:.1f} min with {last['jobs']} at a time")
    out += [*_provenance(summaries), ""]
    head = "| family | " + ("settings | " if with_settings else "")
    out += [head + "fraction | train images | test acc (mean ± std) | seeds | params | MFLOPs | train img/s | fit min |",
            "|---|" + ("---|" if with_settings else "") + "---:|" * 8]
    for r in rows:
        out.append(f"| {r['family']} | " + (f"{r['settings']} | " if with_settings else "")
                   + f"{r['fraction']:g} | {r['train_size']:,} | {r['test_acc_mean']:.4f} ± {r['test_acc_std']:.4f} | "
                   f"{r['seeds']} | {r['params']:,} | {r['flops_per_image'] / 1e6:.1f} | {r['images_per_sec']:,} | "
                   f"{r['wall_time_s'] / 60:.1f} |")
    deit = [s for s in summaries if s.get("family") == "deit" and s.get("status") == "done" and s.get("test")]
    if deit:
        out += ["", "DeiT's heads on test (cls / distillation / the head the table reports):", ""]
        out += [f"- {s['run']}: {s['test'].get('acc_cls', float('nan')):.4f} / "
                f"{s['test'].get('acc_dist', float('nan')):.4f} / {s['test']['acc']:.4f}" for s in deit]
    out += ["", f"Sample efficiency: the smallest training set whose mean test accuracy reaches {threshold:.2f}.", "",
            "| family | " + " | ".join(s or "all runs" for s in settings) + " |", "|---|" + "---:|" * len(settings)]
    eff = sample_efficiency(rows, threshold)
    for family in dict.fromkeys(r["family"] for r in rows):
        cells = [eff.get((family, st), "") for st in settings]
        out.append(f"| {family} | " + " | ".join(f"{c:,}" if c else "" if c == "" else "not reached" for c in cells)
                   + " |")
    bad = [s for s in summaries if s.get("status") in ("failed", "diverged")]
    if bad:
        out += ["", "Runs left out of the table:", ""] + [f"- {s['run']}: {s['status']} ({s.get('error', '')})" for s in bad]
    if plot is not None:
        out += ["", f"![test accuracy against training images]({plot.name})"]
    return "\n".join(out) + "\n"


def _threshold(sweep: dict) -> float:
    values = [p.get("sample_efficiency_accuracy") for p in (sweep.get("profiles") or {}).values()]
    return next((v for v in values if v), 0.8)


def plot(rows: list[dict], summaries: list[dict], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    settings = list(dict.fromkeys(r["settings"] for r in rows))
    for family in dict.fromkeys(r["family"] for r in rows):
        for i, st in enumerate(settings):
            pts = [r for r in rows if r["family"] == family and r["settings"] == st]
            if not pts:
                continue
            ax.errorbar([p["train_size"] for p in pts], [p["test_acc_mean"] for p in pts],
                        yerr=[p["test_acc_std"] for p in pts], marker="o", capsize=3,
                        label=f"{family} ({st})" if st else family, linestyle=("-", "--", ":", "-.")[i % 4])
    ax.set_xscale("log")
    ax.set_xlabel("training images (log scale)")
    ax.set_ylabel("test accuracy")
    ax.set_title(f"{_common_settings(summaries)}: mean ± std over seeds", fontsize=8)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, metadata={"Software": None})
    plt.close(fig)


def make_tables(exp_dir: Path, out_dir: Path, readme: Path | None = None) -> list[Path]:
    """<out>/<name>.csv and .md, and .png when the runs span more than one training-set size;
    also the README's block for this experiment, if it has one."""
    name = exp_dir.name
    summaries = collect(exp_dir)
    sweep_file = exp_dir / "sweep.json"
    sweep = json.loads(sweep_file.read_text()) if sweep_file.exists() else {}
    rows = aggregate(summaries)
    if not rows:
        raise ValueError(f"no finished runs in {exp_dir}: run the experiment first")
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = [out_dir / f"{name}.csv", out_dir / f"{name}.md"]
    write_csv(rows, paths[0])
    png = None
    if len({r["train_size"] for r in rows}) > 1:
        png = out_dir / f"{name}.png"
        plot(rows, summaries, png)
        paths.append(png)
    text = render_markdown(name, rows, summaries, sweep, png)
    paths[1].write_text(text)
    if readme is not None and update_readme_block(readme, name, text, out_dir):
        paths.append(readme)
    return paths


def update_readme_block(readme: Path, name: str, text: str, out_dir: Path) -> bool:
    """Replaces the README's generated block for `name` (title dropped, image paths made relative
    to the README). False when the README has no such block."""
    begin, end = f"<!-- tables:{name} -->", f"<!-- /tables:{name} -->"
    if not readme.is_file():
        return False
    doc = readme.read_text()
    if begin not in doc or end not in doc:
        return False
    body = text.split("\n", 2)[2].replace(f"]({name}.png)", f"]({out_dir.as_posix()}/{name}.png)")
    head, rest = doc.split(begin, 1)
    readme.write_text(f"{head}{begin}\n{body.strip()}\n{end}{rest.split(end, 1)[1]}")
    return True


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments tables", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--experiment", nargs="+", help="experiment folders under runs_dir (default: every one with runs)")
    p.add_argument("--runs_dir", default="results/runs", help="default results/runs")
    p.add_argument("--out", default="results", help="where tables and plots go (default results)")
    p.add_argument("--readme", default=str(README), help="README whose generated blocks to refresh ('' for none)")
    a = p.parse_args(argv)
    runs_dir = Path(a.runs_dir)
    names = a.experiment or sorted({d.parent.parent.name for d in runs_dir.glob("*/*/summary.json")})
    if not names:
        raise ValueError(f"no runs in {runs_dir}: run an experiment first (make exp-datascale)")
    for name in names:
        if not (runs_dir / name).is_dir():
            raise ValueError(f"experiment {name!r} has no folder in {runs_dir}")
        for path in make_tables(runs_dir / name, Path(a.out), Path(a.readme) if a.readme else None):
            print(f"wrote {path}")
    return 0
