"""`python -m experiments probe RUN_DIR [RUN_DIR ...]`: the inductive-bias probes on trained runs.

For each run folder written by `fit` (its best checkpoint, its data), on the first --images test
images (reporting only: nothing is chosen from them), the probes of modules.probes that apply:
  robustness  every family: PatchDrop 0..0.9, patch shuffle per grid size, accuracy under diagonal
              shifts (multiples of the patch marked), shift consistency (black-filled and circular);
              cells of --patch pixels for every family, so CNNs and transformers lose the same pixels;
              a dropped cell or an uncovered border is black (0 before normalisation), as Naseer et al.
  attention   vit, deit, hybrid, swin: mean attention distance per layer and head, in input pixels
  maps        vit, deit, hybrid with a class token: last-layer [CLS] attention and attention rollout
  pos_embed   vit, deit, hybrid with a position table: patch-to-patch cosine similarity, 2D numbers
  cka         every family: minibatch CKA between the model's own blocks
Results go to <run>/probes.json (with the code and versions that made them), figures to
<run>/probes/*.png and, as images, to the run's TensorBoard (tags probes/<name>).
"""
from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

import torch
from rich.markup import escape
from rich.progress import Progress

from datamodules import ImageClassificationDataModule
from modules import FAMILIES, probes
from modules.probes.robustness import black
from modules.files import refuse_links

from experiments.runs.run.provenance import git_commit, hardware, versions
from modules.files import write_json

from experiments.runs.run.run_folder import RunFolder
from experiments.runs.run.run_config import load_config
from experiments.runs.run.trained import load_classifier, test_images
from experiments.figures import log_figures, save_png

RESULT = "probes.json"
FIGURES = "probes"
PARTS = ("robustness", "cka", "attention", "maps", "pos_embed")
MAP_IMAGES = 4  # sample test images of the attention maps
BATCH = 100     # images per forward pass: 1.5-2x the throughput of 500 on 2 CPU cores (measured)


def _applicable(h) -> dict[str, str | None]:
    """probe -> None when it applies to the run's model, else why not (from its family's record)."""
    family = FAMILIES[h.family]
    token = family.class_token and (h.pool or "token") == "token"
    table = family.attention == "global" and (h.pos_embed or "learn") != "none"  # a table over one patch grid
    return {"robustness": None, "cka": None,
            "attention": None if family.attention != "none" else f"{h.family} has no attention layers",
            "maps": None if token else f"{h.family} (pool {h.pool}) has no class token",
            "pos_embed": None if table else f"{h.family} (pos_embed {h.pos_embed}) has no position table"}


def _rounded(t: torch.Tensor, digits: int = 4):
    """A tensor as nested lists of rounded floats (NaN -> None), for JSON."""
    if t.ndim == 0:
        v = float(t)
        return None if v != v else round(v, digits)
    return [_rounded(x, digits) for x in t]


def run_precision(model: torch.nn.Module, precision: str | None):
    """The autocast a run was trained and tested under (its summary's precision: bf16-mixed,
    16-mixed), so the robustness probes' clean accuracy is the test accuracy's arithmetic; a
    no-op for 32-true or an unknown precision."""
    dtype = {"bf16": torch.bfloat16, "16": torch.float16}.get(str(precision).split("-")[0])
    if dtype is None or not str(precision).endswith("mixed"):
        return contextlib.nullcontext()
    param = next(model.parameters(), None)
    return torch.autocast(param.device.type if param is not None else "cpu", dtype=dtype)


def probe_model(model: torch.nn.Module, h, images: torch.Tensor, labels: torch.Tensor, patch: int,
                seed: int = 0, parts: tuple[str, ...] = PARTS, precision: str | None = None, *,
                black_pixel: torch.Tensor) -> tuple[dict, dict]:
    """(JSON-ready results, figures by name) of the probes of `parts` that apply to `model`
    (hyper-parameters h). The results keep what the cross-family figures redraw: attention
    distance per layer and head, the position table's similarity matrix, the [CLS] and rollout maps
    with their sample images. The robustness probes (dozens of passes over the images) run under
    the run's own `precision`; attention, CKA and position tables in float32. black_pixel (C,): black
    in the images' normalised space, what PatchDrop blanks with and a shift uncovers."""
    from matplotlib.figure import Figure
    unknown = [p for p in parts if p not in PARTS]
    if unknown:
        raise ValueError(f"probe part {unknown[0]!r}: allowed {', '.join(PARTS)}")
    skip = _applicable(h)
    result = {"parts": list(parts), "not_applicable": {k: v for k, v in skip.items() if v and k in parts}}
    figures = {}
    g = torch.Generator().manual_seed(seed)
    batches = list(images.split(100))
    if "robustness" in parts:
        with run_precision(model, precision):
            result["robustness"] = probes.robustness_curves(model, images, labels, patch, g, black_pixel=black_pixel,
                                                            batch_size=BATCH)
        figures["robustness"] = _robustness_figure(result["robustness"], h.family)
    if "cka" in parts:
        cka = probes.minibatch_cka(model, model, [b for b in batches if len(b) >= 4])
        names = probes.layer_names(model)
        result["cka"] = {"layers": names, "matrix": _rounded(cka, 6)}
        figures["cka"] = probes.cka_heatmap(cka, names, names, title=f"{h.family}: CKA between its blocks").figure
    if "attention" in parts and not skip["attention"]:
        dist = torch.cat([probes.mean_attention_distance(model, b)[None] * len(b) for b in batches]).sum(0) / len(images)
        result["attention_distance"] = _rounded(dist)
        # what the same layers give attending uniformly over their keys: distance of a head that learned nothing
        result["attention_distance_uniform"] = _rounded(probes.mean_attention_distance(model, batches[0], uniform=True))
        # how concentrated, apart from how far: entropy over uniform attention's (1: uniform)
        entropy = torch.cat([probes.attention_entropy(model, b)[None] * len(b) for b in batches]).sum(0) / len(images)
        result["attention_entropy"] = _rounded(entropy)
        figures["attention_distance"] = _distance_figure(dist, h.family, images.shape[-1])
    if "maps" in parts and not skip["maps"]:
        sample = images[:MAP_IMAGES]
        cls = probes.cls_attention(model, sample).mean(1)           # (4, gh, gw): heads averaged
        rollout = probes.attention_rollout(model, sample)           # (4, gh, gw)
        result["attention_maps"] = {"images": _rounded(sample.mean(1), 3), "labels": labels[:MAP_IMAGES].tolist(),
                                    "cls": _rounded(cls, 5), "rollout": _rounded(rollout, 5)}
        figures["attention_maps"] = _maps_figure(sample, cls, rollout, h.family)
    if "pos_embed" in parts and not skip["pos_embed"]:
        sim = probes.pos_embed_similarity(model)                    # (gh, gw, gh, gw)
        result["pos_embed"] = {**probes.pos_embed_2d_structure(sim), "similarity": _rounded(sim)}
        figures["pos_embed_similarity"] = probes.plot_pos_embed_similarity(
            sim, Figure(figsize=(7, 6)), title=f"{h.family} ({h.pos_embed or 'learn'}): position-embedding similarity")
    return result, figures


def _robustness_figure(r: dict, family: str):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(11, 3.2))
    drop, shuffle, shift = fig.subplots(1, 3)
    drop.plot(r["drop_fractions"], r["patchdrop_accuracy"], "o-")
    drop.set(xlabel="fraction of cells blanked black", ylabel="test accuracy", title="PatchDrop", ylim=(0, 1))
    shuffle.plot([str(g) for g in r["shuffle_grids"]], r["shuffle_accuracy"], "o-")
    shuffle.set(xlabel="shuffled grid (cells per side)", title="patch shuffle", ylim=(0, 1))
    shift.plot(r["shifts"], r["shift_accuracy"], "o-", label="black-filled")
    shift.plot(r["shifts"], r["shift_accuracy_circular"], "s--", label="circular")
    multiples = [s for s, m in zip(r["shifts"], r["shift_is_patch_multiple"]) if m and s]
    for s in multiples:
        shift.axvline(s, color="grey", alpha=0.3)
    shift.set(xlabel="diagonal shift (pixels; grey: patch multiples)", title="shift", ylim=(0, 1))
    shift.legend(fontsize=7)
    fig.suptitle(f"{family}: {r['n_images']} test images, {r['patch']}-pixel cells")
    fig.tight_layout()
    return fig


def _distance_figure(dist: torch.Tensor, family: str, image_size: int):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(4.5, 3.5))
    ax = fig.subplots()
    for layer, row in enumerate(dist):
        heads = row[~row.isnan()]
        ax.scatter([layer + 1] * len(heads), heads.numpy(), s=14)
    ax.set(xlabel="layer (block)", ylabel="mean attention distance (pixels)", ylim=(0, image_size),
           title=f"{family}: one dot per head")
    fig.tight_layout()
    return fig


def _maps_figure(images: torch.Tensor, cls: torch.Tensor, rollout: torch.Tensor, family: str):
    from matplotlib.figure import Figure
    fig = Figure(figsize=(2 * len(images), 6))
    axes = fig.subplots(3, len(images), squeeze=False)
    for i in range(len(images)):
        for row, (what, picture) in enumerate((("image", images[i].mean(0)), ("[CLS] attention", cls[i]),
                                               ("rollout", rollout[i]))):
            ax = axes[row][i]
            ax.imshow(picture.float().numpy(), cmap="gray" if row == 0 else "inferno")
            ax.set_xticks([])
            ax.set_yticks([])
            if i == 0:
                ax.set_ylabel(what, fontsize=8)
    fig.suptitle(f"{family}: last layer [CLS] attention (heads averaged) and attention rollout")
    fig.tight_layout()
    return fig


def probe_run(run_dir: Path, images: int, patch: int, seed: int = 0, parts: tuple[str, ...] = PARTS) -> Path:
    """The applicable probes of `parts` on one run; returns the path of its probes.json."""
    refuse_links(run_dir)  # its figures and events are written there
    classifier = load_classifier(run_dir)
    needs_images = any(p != "pos_embed" for p in parts)  # the position table is read from the weights alone
    data = load_config(run_dir)["data"]
    x, y = test_images(data, images if needs_images else 1)
    summary = RunFolder(run_dir).summary()
    precision = summary.precision if summary is not None else None
    result, figures = probe_model(classifier.model, classifier.hparams, x, y, patch, seed, parts, precision,
                                  black_pixel=black(*ImageClassificationDataModule(**data).normalization))
    out = Path(run_dir) / FIGURES
    out.mkdir(exist_ok=True)
    for name, fig in figures.items():
        save_png(fig, out / f"{name}.png", dpi=100)
    log_figures(figures, run_dir, "probes", replace=False)  # the run's folder: its curves stay
    path = Path(run_dir) / RESULT
    write_json(path, {**result, "images": len(y) if needs_images else 0, "split": "test", "patch": patch, "seed": seed,
                      "precision": precision,
                      "family": classifier.hparams.family, "figures": sorted(f"{FIGURES}/{n}.png" for n in figures),
                      "commit": git_commit(), "versions": versions(), "hardware": hardware()})
    return path


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m experiments probe", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("runs", nargs="+", help="run folders written by `python -m experiments fit`")
    p.add_argument("--images", type=int, default=1000, help="test images probed (default 1000)")
    p.add_argument("--patch", type=int, default=4, help="cell size in pixels for PatchDrop and shifts (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random drops, shuffles and shifts (default 0)")
    p.add_argument("--parts", nargs="+", default=list(PARTS), metavar="PART",
                   help=f"which probes: {', '.join(PARTS)} (default all of them)")

    def one_line(message: str):
        raise ValueError(f"{message} (python -m experiments probe --help lists the options)")
    p.error = one_line
    a = p.parse_args(argv)
    if a.images < 4:
        raise ValueError(f"--images {a.images}: allowed integers >= 4 (CKA's unbiased estimator needs 4 per batch)")
    if not 0 <= a.seed < 2 ** 32:  # torch.Generator's seeds, and a run's recorded seed
        raise ValueError(f"--seed {a.seed}: allowed integers from 0 to 2**32 - 1")
    bad = [x for x in a.parts if x not in PARTS]
    if bad:
        raise ValueError(f"--parts {bad[0]}: allowed {', '.join(PARTS)}")
    for run in a.runs:  # every folder checked before any work
        load_config(run)
        refuse_links(run)
    with Progress() as progress:
        task = progress.add_task("probes", total=len(a.runs))
        for run in a.runs:
            progress.console.print(escape(f"{run}: wrote {probe_run(Path(run), a.images, a.patch, a.seed, tuple(a.parts))}"))
            progress.advance(task)
    return 0
