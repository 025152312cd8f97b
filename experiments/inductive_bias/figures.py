"""exp-inductive-bias's figures: each drawn from a profile's numbers, with its caption, what it
measures, what the literature found, what this profile's records show, and its verdict."""
from __future__ import annotations

import statistics

import math

from modules.budgets import kind_of, reading_order

from experiments.inductive_bias.numbers import (BASELINE, DROP_AT, STRUCTURE_MIN_GAP, TABLES, UNIFORM_TOLERANCE, Profile, _at,
                                                OLDER_FILL, _concentration, _layer_means, ablation_rows, blanked_black,
                                                growth_claim, kept, older_fill,
                                                position_claims, robustness_claims, settled_rows, still_uniform)
from experiments.inductive_bias.words import (_pm, _single_class_text, _size_label, _uniform_caveat,
                                              robustness_text, robustness_verdict, structure_text, unsettled)
from experiments.report.claim import cannot_tell_together, load_figures
from experiments.figures import family_colour
from experiments.statistics import mean_ci
from experiments.report.verdicts import STILL_IMPROVING, size_against
from experiments.runs.run.convergence import still_improving

FIGURE_TEXT = load_figures("inductive_bias")  # caption, what it measures, what the literature found (claims.yaml)


def here(p: Profile, name: str, ablations: list[dict], families: list[dict]) -> str:
    """What this profile's records show in figure `name`, from the numbers."""
    if name == "ablation":
        parts = []
        for f in p.fractions("ablations"):
            at = [r for r in ablations if r["fraction"] == f and r["acc"] is not None]
            if len(at) == 1:  # nothing to rank it against (the others not run, or left out as still improving)
                parts.append(f"at {_size_label(p, f)} only {at[0]['name']} is read ({_pm(at[0]['acc'])})")
            elif at:
                best = max(at, key=lambda r: r["acc"].value)
                none = next((r for r in at if r["name"] == "none" and r["delta"] is not None), None)
                parts.append(f"at {_size_label(p, f)} the highest mean is {best['name']}'s ({_pm(best['acc'])}; the "
                             "paired differences are read in the table)"
                             + (f", none − learn {_pm(none['delta'], signed=True)}" if none else ""))
        return "; ".join(parts) + "."
    if name == "attention_distance":
        sizes = len({r["fraction"] for r in families})  # with several, every number says its size
        return "; ".join(f"{r['name']}" + (f" at {_size_label(p, r['fraction'])}" if sizes > 1 else "")
                         + f": last − first layer {_pm(r['dist_growth'], 1, signed=True)} px, layer-1 heads "
                         f"{min(r['first_heads']):.1f}-{max(r['first_heads']):.1f} px"
                         + (f" ({r['rel_first'].value:.2f} of uniform attention's distance)" if r["rel_first"] else "")
                         for r in families if r["dist_growth"] is not None and r["first_heads"]) + "."
    if name == "pos_embed_similarity":
        return "; ".join(f"{r['name']} at {r['fraction']:g}: {structure_text(r)}"
                         for r in ablations if r["name"] in TABLES and r["two_d"]) + "."
    if name in ("occlusion", "shuffle"):
        key = "patchdrop" if name == "occlusion" else "shuffle4"
        what = f"{DROP_AT:.0%} of the cells dropped" if name == "occlusion" else "the 4x4 grid shuffled"
        caveat = f" Note: {_uniform_caveat(families)}" if name == "shuffle" and _uniform_caveat(families) else ""
        single = _single_class_text(families) if name == "occlusion" else ""
        if key == "patchdrop" and all(r["patchdrop"] is None for r in families) and older_fill(p, families):
            return f"{OLDER_FILL}."
        parts = []
        for size in sorted({r["fraction"] for r in families}):  # one training-set size at a time
            rows = [r for r in families if r["fraction"] == size]
            rel, words = kept(rows, key)
            parts.append(f"at {_size_label(p, size)}, each family keeps this {words}: "
                         + ", ".join(f"{f} {v:.2f}" for f, v in rel.items())
                         + f"; {robustness_text(robustness_claims(p, size, key, {r['name'] for r in rows}))}")
        return f"with {what}: " + "; ".join(parts) + f".{single}{caveat}"
    settled = {(r["name"], r["fraction"]) for r in families}  # the rows given: the reading's plateaued ones
    if name == "shift":
        parts = []
        for fam in [f for f in p.families() if (f, p.fractions("families")[-1]) in settled]:
            probes = [x["robustness"] for x in p.probe_cell(fam, p.fractions("families")[-1]).values()
                      if x.get("robustness") and blanked_black(x["robustness"])]
            patch = p.axes.get("probe_patch")
            if probes and all({patch - 1, patch, patch + 1} <= set(r["shifts"]) for r in probes):
                at = {d: statistics.fmean(_at(r["shifts"], r["shift_accuracy"], patch + d) for r in probes)
                      for d in (-1, 0, 1)}
                cons = statistics.fmean(r["shift_consistency"] for r in probes)
                parts.append(f"{fam} consistency {cons:.2f}, accuracy {at[0]:.2f} at a {patch}-pixel shift vs "
                             f"{at[-1]:.2f} / {at[1]:.2f} at {patch - 1} / {patch + 1} pixels")
        if not parts and older_fill(p, families):
            return f"{OLDER_FILL}."
        return "; ".join(parts) + "."
    if name == "cka":
        return "; ".join(f"{c['family']} at {_size_label(p, c['fraction'])}: last block vs the ResNet's last "
                         f"{c['matrix'][-1][-1]:.2f}, first vs first {c['matrix'][0][0]:.2f}" for c in p.cka
                         if {(c["family"], c["fraction"]), (c["reference"], c["fraction"])} <= settled) + "."
    if name == "attention_maps":
        f = p.fractions("families")[-1]
        parts = []
        for fam in [x for x in p.families() if (x, f) in settled]:
            cell = p.probe_cell(fam, f)
            m = cell[min(cell)].get("attention_maps") if cell else None
            if m:
                parts.append(f"{fam}: top-10% patches hold {_concentration(m['cls']):.2f} of the [CLS] attention and "
                             f"{_concentration(m['rollout']):.2f} of the rollout")
        return "; ".join(parts) + " (0.10 would be uniform)."
    return ""


def verdict(p: Profile, name: str, ablations: list[dict], families: list[dict]) -> str:
    """Whether figure `name` agrees with the published finding, from the numbers ('' where the
    finding has no test here)."""
    if name == "ablation":
        claims = [(r, c) for r, c in position_claims(p, ablations) if c.converged]  # as the reading takes them
        if not claims:
            return ""
        said = {c.category for _, c in claims}   # the shared vocabulary: experiments/report/verdicts.py
        agrees = ("agrees" if all(c.agrees for _, c in claims) else
                  "disagrees" if said - {claims[0][1].wording.expected, "no difference", "cannot tell"}
                  or said == {"no difference"}
                  else "cannot tell")
        direction = (f"in direction {agrees} with the paper's loss without a position embedding" if agrees != "cannot tell"
                     else f"in direction, whether it agrees with the paper's loss without a position embedding: "
                          f"{cannot_tell_together([c for _, c in claims])}")
        return (f"{direction}; none − learn "
                + "; ".join(f"at {_size_label(p, r['fraction'])}: {c.read()}, "
                            f"{size_against(c.estimate, c.wording.size)} (ViT-B/16, ImageNet 5-shot)" for r, c in claims)
                + ".")
    if name == "attention_distance":
        flat = still_uniform([r for r in families if r["name"] != "swin"])
        if flat:
            return (f"no local heads at this budget: {', '.join(flat)} attend on average as far as uniform attention "
                    f"would in their first and last layers (the layer means within {UNIFORM_TOLERANCE:.0%} of it); the "
                    "paper finds local heads after JFT-300M pre-training, and Raghu et al. 2021 fewer with less data, "
                    "so this is not held against it; growth with depth is read per family, with its interval, under "
                    "What the numbers say (a reading of distance: how concentrated attention is, is read apart).")
        grows = [r["name"] for r in families if r["name"] != "swin" and growth_claim(r).category == "higher"]
        return (f"agrees for {', '.join(grows)}: distance grows with depth." if grows else "")
    if name == "pos_embed_similarity":
        learned = [r for r in ablations if r["name"] == BASELINE and r["two_d"]]
        if not learned:
            return ""
        hits = sum(sum(r["two_d"]) for r in learned)
        total = sum(len(r["two_d"]) for r in learned)
        said = ("agrees: the learned 1D table has 2D structure in every run" if hits == total else
                "disagrees: the learned 1D table shows no 2D structure in any run" if hits == 0 else
                f"partly: the learned 1D table has 2D structure in {hits} of {total} runs")
        return (f"{said} (row and column neighbours both at least {STRUCTURE_MIN_GAP} of cosine above far "
                f"patches): " + "; ".join(f"at {_size_label(p, r['fraction'])}, {structure_text(r)}" for r in learned)
                + ".")
    if name in ("occlusion", "shuffle"):
        key = "patchdrop" if name == "occlusion" else "shuffle4"
        if all(r[key] is None for r in families):
            return ""
        said = [(size, robustness_verdict(robustness_claims(p, size, key, {r["name"] for r in families
                                                                           if r["fraction"] == size})))
                for size in sorted({r["fraction"] for r in families})]
        return " ".join(f"At {_size_label(p, size)}: {v}." for size, v in said if v)
    return ""


def figures_section(p: Profile, pngs: dict[str, str], ablations: list[dict], families: list[dict]) -> list[str]:
    """The figures, each captioned from the rows whose runs all plateaued, as the reading is (settled_rows):
    the rows left out are named, and where none is left the profile's not-read sentence stands in."""
    out, gate, left = ["### Figures", ""], unsettled(p), []
    if gate:
        ablations, families, left = settled_rows(ablations, families)
    for k, png in pngs.items():
        caption, measures, published = FIGURE_TEXT[k].caption, FIGURE_TEXT[k].measures, FIGURE_TEXT[k].published
        apart = (f" (not read: {', '.join(left)}, where a run was still improving at its last validation "
                 f"({STILL_IMPROVING}))" if left else "")
        said = (f"*Here*: {gate}" if gate and not ablations and not families else
                f"*Here*{apart}: {here(p, k, ablations, families)}"
                + (f" *Verdict*: {verdict(p, k, ablations, families)}" if verdict(p, k, ablations, families) else ""))
        out += [f"#### {caption}", "", f"![{caption}]({png})", "", f"*Measures*: {measures}. *Published*: {published}. "
                + said, ""]
    return out
def _colour(family: str):
    return family_colour(family, "k")  # a family has the same colour in every experiment's figures



def _mean_curve(probes: list[dict], x_key: str, y_key: str):
    curves = [(r["robustness"][x_key], r["robustness"][y_key]) for r in probes if r.get("robustness")]
    if not curves:
        return None
    xs = curves[0][0]
    ys = [statistics.fmean(c[1][i] for c in curves) for i in range(len(xs))]
    cis = [mean_ci([c[1][i] for c in curves]).ci95 or 0.0 for i in range(len(xs))]
    return xs, ys, cis


def plot_ablation(p: Profile, rows: list[dict], fig) -> None:
    ax = fig.subplots()
    fractions, variants = p.fractions("ablations"), p.variants()
    width = 0.8 / max(1, len(fractions))
    for i, f in enumerate(fractions):
        by = {r["name"]: r for r in rows if r["fraction"] == f and r["acc"] is not None}
        xs = [j + i * width for j, v in enumerate(variants) if v in by]
        ax.bar(xs, [by[v]["acc"].value for v in variants if v in by], width,
               yerr=[by[v]["acc"].ci95 or 0 for v in variants if v in by], capsize=3, label=_size_label(p, f))
    ax.set_xticks([j + width * (len(fractions) - 1) / 2 for j in range(len(variants))], variants)
    ax.set(ylabel="test accuracy", ylim=(0, 1), title="ViT ablations (bars: 95% t-interval over seeds)")
    ax.legend(fontsize=8)


def _named(p: Profile, family: str, fraction: float) -> str:
    """A family as a figure names it: marked † where a run of its cell at `fraction` was still
    improving, as the tables mark its numbers (the figure shows them; no reading rests on them)."""
    cell = p.cell("families", "family", family, fraction)
    return family + (f" {STILL_IMPROVING}" if any(still_improving(s) for s in cell.values()) else "")


def plot_attention_distance(p: Profile, fig) -> None:
    f = p.fractions("families")[-1]
    fams = [fam for fam in p.families() if any(x.get("attention_distance") for x in p.probe_cell(fam, f).values())]
    axes = fig.subplots(1, max(1, len(fams)), squeeze=False)[0]
    for ax, fam in zip(axes, fams):
        for seed, x in sorted(p.probe_cell(fam, f).items()):
            for layer, row in enumerate(x.get("attention_distance") or []):
                heads = [v for v in row if v is not None]
                ax.scatter([layer + 1 + 0.12 * seed] * len(heads), heads, s=12, color=_colour(fam),
                           marker="os^v"[seed % 4], alpha=0.8)
        uniform = next((x["attention_distance_uniform"] for x in p.probe_cell(fam, f).values()
                        if x.get("attention_distance_uniform")), None)
        if uniform:
            means = _layer_means(uniform)
            ax.plot(range(1, len(means) + 1), means, "k--", lw=1, label="uniform attention")
            ax.legend(fontsize=7)
        ax.set(title=_named(p, fam, f), xlabel="layer (block)",
               ylim=(0, 28 if p.axes.get("dataset") == "fashion_mnist" else None))
    axes[0].set_ylabel("mean attention distance (input pixels)")
    fig.suptitle(f"attention distance at fraction {f:g}: one dot per head (marker: seed)", fontsize=9)


def _similarity_grid(sim: list, fig, title: str) -> None:
    import numpy
    import torch

    from modules.probes import plot_pos_embed_similarity
    # an undefined similarity, written as null in probes.json: NaN again, as the probe computed it
    plot_pos_embed_similarity(torch.tensor(numpy.array(sim, dtype=numpy.float64)).float(), fig, title=title)


def plot_pos_embed(p: Profile, fig) -> bool:
    panels = []
    for f in p.fractions("ablations"):
        for v in TABLES:
            cell = p.ablation_probes(v, f)
            if cell:
                seed = min(cell)
                sim = (cell[seed].get("pos_embed") or {}).get("similarity")
                if sim:
                    panels.append((f"ViT {v} at {f:g}, seed {seed}", sim))
    if not panels:
        return False
    cols = min(3, len(panels))
    subs = fig.subfigures(math.ceil(len(panels) / cols), cols, squeeze=False)
    for sub, (title, sim) in zip(subs.flat, panels):
        _similarity_grid(sim, sub, title)
    return True


def plot_robustness(p: Profile, fig, what: str) -> None:
    f = p.fractions("families")[-1]
    ax = fig.subplots()
    x_key, y_key, xlabel = {"occlusion": ("drop_fractions", "patchdrop_accuracy", "fraction of cells blanked black"),
                            "shuffle": ("shuffle_grids", "shuffle_accuracy", "grid of shuffled cells (per side)"),
                            "shift": ("shifts", "shift_accuracy", "diagonal shift (pixels, black-filled)")}[what]
    patch = p.axes.get("probe_patch")
    drawn = 0
    for fam in p.families():
        probes = [x for x in p.probe_cell(fam, f).values()  # shuffling blanks nothing: any fill's record
                  if what == "shuffle" or blanked_black(x.get("robustness") or {})]
        curve = _mean_curve(probes, x_key, y_key)
        if curve is None:
            continue
        drawn += 1
        xs, ys, cis = curve
        ax.errorbar(xs, ys, yerr=cis, marker="o", ms=3, capsize=2, color=_colour(fam),
                    ls="--" if kind_of(fam) == "CNN" else "-", label=_named(p, fam, f))
    if what == "shift" and patch:
        for s in range(patch, 3 * patch, patch):
            ax.axvline(s, color="grey", alpha=0.3)
    if what == "shuffle":
        ax.set_xscale("log", base=2)
    ax.set(xlabel=xlabel, ylabel="test accuracy", ylim=(0, 1),
           title=f"{what} at fraction {f:g} (dashed: CNNs; bars: 95% t-interval over seeds)")
    if drawn:
        ax.legend(fontsize=8)
    elif what != "shuffle" and older_fill(p, [{"name": fam, "fraction": f} for fam in p.families()]):
        ax.text(0.5, 0.5, "not read: probed with the older, mean-colour fill\n(make exp-inductive-bias probes again)",
                ha="center", va="center", transform=ax.transAxes, fontsize=9)


def plot_cka(p: Profile, fig) -> bool:
    if not p.cka:
        return False
    from modules.probes import cka_heatmap
    order = {f: i for i, f in enumerate(reading_order())}
    cka = sorted(p.cka, key=lambda c: (c.get("fraction", 0), order.get(c.get("family"), 99)))
    axes = fig.subplots(1, len(cka), squeeze=False)[0]
    import torch
    for ax, c in zip(axes, cka):
        cka_heatmap(torch.tensor(c["matrix"]), c["layers"], c["reference_layers"],
                    title=f"{_named(p, c['family'], c['fraction'])} vs {_named(p, c['reference'], c['fraction'])} "
                          f"({c['fraction']:g})", ax=ax)
    return True


def plot_maps(p: Profile, fig) -> bool:
    import numpy
    f = p.fractions("families")[-1]
    maps = []
    for fam in p.families():
        cell = p.probe_cell(fam, f)
        if cell and cell[min(cell)].get("attention_maps"):
            maps.append((fam, cell[min(cell)]["attention_maps"]))
    if not maps:
        return False
    n = len(maps[0][1]["images"])
    axes = fig.subplots(1 + 2 * len(maps), n, squeeze=False)
    rows = [("image", maps[0][1]["images"], "gray")]
    for fam, m in maps:
        rows += [(f"{_named(p, fam, f)} [CLS]", m["cls"], "inferno"), (f"{_named(p, fam, f)} rollout", m["rollout"], "inferno")]
    for i, (label, pictures, cmap) in enumerate(rows):
        for j in range(n):
            ax = axes[i][j]
            ax.imshow(numpy.array(pictures[j], dtype=float), cmap=cmap)  # null (NaN as probes.json writes it): blank
            ax.set_xticks([])
            ax.set_yticks([])
            if j == 0:
                ax.set_ylabel(label, fontsize=7)
    fig.suptitle(f"last-layer [CLS] attention (heads averaged) and rollout, seed {min(cell)}, fraction {f:g}",
                 fontsize=9)
    return True


def draw_figures(p: Profile) -> dict:
    """name -> matplotlib Figure of every figure the profile's records can draw."""
    from matplotlib.figure import Figure
    figs = {}
    ablations = ablation_rows(p)
    if any(r["acc"] is not None for r in ablations):
        figs["ablation"] = Figure(figsize=(8, 3.8))
        plot_ablation(p, ablations, figs["ablation"])
    if p.entries("families"):
        figs["attention_distance"] = Figure(figsize=(12, 3.4))
        plot_attention_distance(p, figs["attention_distance"])
    pos = Figure(figsize=(15, 10))
    if plot_pos_embed(p, pos):
        figs["pos_embed_similarity"] = pos
    if p.probes:
        for what in ("occlusion", "shuffle", "shift"):
            figs[what] = Figure(figsize=(6.5, 4))
            plot_robustness(p, figs[what], what)
    cka = Figure(figsize=(3.3 * max(1, len(p.cka)), 3.4))
    if plot_cka(p, cka):
        figs["cka"] = cka
    maps = Figure(figsize=(7, 10))
    if plot_maps(p, maps):
        figs["attention_maps"] = maps
    for name, fig in figs.items():
        if name != "pos_embed_similarity":
            fig.tight_layout()
    return figs
