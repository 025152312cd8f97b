"""exp-inductive-bias's words: the ablation, family and position-table sections of
results/inductive_bias.md and the reading of what the numbers say, each claim a Claim (its fixed
words claims.yaml's) said in the shared vocabulary (experiments/report/verdicts.py)."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from experiments.inductive_bias.numbers import (BASELINE, CLAIMS, DROP_AT, NAME, SINGLE_CLASS, STRUCTURE_MIN_GAP,
                                                OLDER_FILL, TABLE8, TABLES, UNIFORM_TOLERANCE, VERSIONS, Profile, _concentration,
                                                one_value,
                                                _test_acc, growth_claim, kept, locality, locality_claim,
                                                position_claims, robustness_claims, settled_rows, single_class,
                                                still_uniform)
from experiments.report.claim import Claim, read_together
from experiments.report.records import left_out_line, read_runs
from experiments.statistics import Estimate
from experiments.report.table_format import fmt, markdown_table, plus_minus
from experiments.report.verdicts import STILL_IMPROVING, not_read, size_against
from experiments.runs.run.convergence import still_improving


def _pm(est: Estimate | None, digits: int = 3, signed: bool = False) -> str:
    if est is None:
        return "—"
    return plus_minus(est.value, est.ci95, signed, digits, no_interval=" (1 seed)")


def _pairs(row: dict) -> str:
    """The pairs behind a Δ, where fewer than the row's seeds (a seed the baseline lacks drops out)."""
    d = row.get("delta")
    return f" ({d.n} pairs)" if d is not None and d.n != row["seeds"] else ""


def _steps_apart(ablations: list[dict], row: dict) -> str:
    """Where a variant trained another number of steps than the `learn` baseline of its size."""
    base = next((r for r in ablations if r["name"] == BASELINE and r["fraction"] == row["fraction"]), None)
    if base is None or not isinstance(row.get("steps"), int) or not isinstance(base.get("steps"), int) \
            or row["steps"] == base["steps"]:
        return ""
    return (f"; {row['name']} trained {row['steps']:,} steps, learn {base['steps']:,}, each to its plateau")
def _size_label(p: Profile, f: float) -> str:
    n = p.size(f)
    return f"{f:g} ({n:,} images)" if isinstance(n, int) else f"{f:g}"



def _steps_at(p: Profile, fraction: float, runs: list) -> str:
    """The steps of the finished runs at `fraction`: one number where they all trained the same,
    else each family's and each ViT variant's (each row trained to its own plateau)."""
    def said(steps) -> str:
        return f"{steps:,}" if isinstance(steps, int) else "unknown" if steps is None else fmt(steps)
    every = one_value(s.steps for s in runs if s.fraction == fraction)
    if every != "varies":
        return said(every)
    rows = {}
    for table, key in (("families", "family"), ("ablations", "variant")):
        for e in p.entries(table):
            s = p.runs.get(e["run"])
            if e["fraction"] == fraction and s is not None and s.status == "done":
                rows.setdefault(e[key], []).append(s.steps)
    return ", ".join(f"{name} {said(one_value(steps))}" for name, steps in rows.items())


def provenance(p: Profile) -> list[str]:
    ax, runs = p.axes, [s for s in p.runs.values() if s.status == "done"]
    grid = sorted(ax.get("lrs") or [])
    edge = {grid[0]: " (lowest of the grid)", grid[-1]: " (highest of the grid)"} if len(grid) > 1 else {}
    lrs = ", ".join(f"{c['family']} {c['lr']:g}{edge.get(c['lr'], '')} at {c['fraction']:g}"
                    for c in (p.rec.get("tuning") or {}).get("choices") or []
                    if c.get("tuned_at", c["fraction"]) == c["fraction"])
    steps = "; ".join(f"at {_size_label(p, f)}: {_steps_at(p, f, runs)}"
                      for f in sorted({s.fraction for s in runs if s.fraction is not None}))
    hardware = sorted({s.hardware for s in runs if s.hardware})
    versions = sorted({", ".join(f"{k} {v}" for k, v in (s.versions or {}).items() if k in VERSIONS)
                       for s in runs} - {""})
    commits = sorted({s.commit for s in runs if s.commit}
                     | {x.get("commit") for x in p.probes.values() if x.get("commit")})
    out = [f"- data: {ax.get('dataset')}, budget {p.budget}, batch {ax.get('batch_size')}, "
           f"{one_value(s.val_size for s in runs) or '?'} validation images; seeds {ax.get('seeds')}",
           f"- steps per run: {steps or 'none finished'}",
           f"- learning rates chosen on validation (grid {ax.get('lrs')}, seed {(ax.get('seeds') or ['?'])[0]}): "
           f"{lrs or 'none yet'}; every ViT ablation uses ViT's lr of the nearest tuned fraction"
           + ("; a choice at an end of the grid may not be the family's best lr" if "of the grid" in lrs else ""),
           f"- probes: the first {ax.get('probe_images')} test images, {ax.get('probe_patch')}-pixel cells for "
           f"every family; CKA against the ResNet of seed {(ax.get('seeds') or ['?'])[0]}",
           f"- hardware: {'; '.join(hardware) or 'not recorded'}",
           f"- versions: {'; '.join(versions) or 'not recorded'}",
           f"- commit{'s' if len(commits) > 1 else ''}: {', '.join(commits) or 'not recorded'}"]
    last = p.rec.get("last_invocation")
    planned = len({e["run"] for t in ("families", "ablations") for e in p.entries(t)})
    statuses = defaultdict(int)
    for run in {e["run"] for t in ("families", "ablations") for e in p.entries(t)}:
        statuses[(p.runs[run].status if run in p.runs else None) or "not run"] += 1
    out.append(f"- runs in the tables: {planned} (" + ", ".join(f"{n} {k}" for k, n in sorted(statuses.items()) if n)
               + ")" + (f"; the last `make exp-inductive-bias` of this profile that trained: {last.get('runs')} runs "
                        "launched, "
                        f"{(last.get('wall_time_s') or 0) / 60:.1f} min wall time with probes, {last.get('jobs')} "
                        "at a time" if last else ""))
    return out


def _either_improving(by: dict, variant: str, fraction: float) -> bool:
    """A Δ rests on its own cell and on the baseline's at the same fraction: marked when either is."""
    return any(by[v, fraction]["still_improving"] for v in (variant, BASELINE) if (v, fraction) in by)


def ablation_section(p: Profile, rows: list[dict]) -> list[str]:
    fractions = p.fractions("ablations")
    head = ["variant", "options"] + [f"test acc at {_size_label(p, f)}" for f in fractions] \
        + [f"Δ vs learn at {f:g}" for f in fractions]
    args = (p.axes.get("ablation_args") or {})
    by = {(r["name"], r["fraction"]): r for r in rows}
    table = []
    for v in p.variants():
        opts = ", ".join(f"{k.split('.', 1)[-1]} {fmt(x)}" for k, x in (args.get(v) or {}).items()) \
            or "registry default"
        cells = [(_pm(by[v, f]["acc"]) + (f" {STILL_IMPROVING}" if by[v, f]["still_improving"] else "")
                  if (v, f) in by else "not run") for f in fractions]
        deltas = [("—" if v == BASELINE else _pm(by[v, f]["delta"], signed=True) + _pairs(by[v, f])
                   + (f" {STILL_IMPROVING}" if _either_improving(by, v, f) else ""))
                  if (v, f) in by else "not run" for f in fractions]
        table.append([v, opts, *cells, *deltas])
    return ["### ViT ablations: position embedding (ViT Table 8), pooling and patch size", "",
            "Test accuracy, mean ± 95% t-interval over seeds; Δ: paired by seed with the `learn` ViT (learned 1D "
            f"table, [CLS] token, patch 4) of the same subset. {STILL_IMPROVING}: a run of the cell was still "
            "improving at its last validation; a Δ is marked when either of its cells is.", "", *markdown_table(head, table, 2), "",
            f"Published ({TABLE8['source']}): " + ", ".join(f"{k} {v:.4f}" for k, v in TABLE8["rows"].items())
            + f"; DeiT-T on CIFAR-100 without its position embedding: {TABLE8['deit_t_cifar100'][0]:.3f} -> "
            f"{TABLE8['deit_t_cifar100'][1]:.3f} (Lu et al. 2022).", ""]


def not_probed_line(p: Profile, rows: list[dict]) -> list[str]:
    """The families of this profile as its spec stands now whose runs at a family size have no
    probes on record yet (a family added to the spec since the last invocation, or not trained yet),
    each with those sizes; [] where every one has them or no spec plans this profile."""
    from experiments.inductive_bias.runner import load_ib_spec
    try:
        profile = load_ib_spec(NAME)["profiles"][p.name]
        families, fractions = list(profile["families"]), [float(f) for f in profile["family_fractions"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    probed = {(r["name"], r["fraction"]) for r in rows if r["seeds"] and r["clean"] is not None}
    missing = {fam: [f for f in fractions if (fam, f) not in probed] for fam in families}
    parts = [f"{fam} at {', '.join(_size_label(p, f) for f in fs)}" for fam, fs in missing.items() if fs]
    return [f"Not probed yet in the {p.name} profile as its spec stands: {'; '.join(parts)}.", ""] if parts else []


def family_section(p: Profile, rows: list[dict]) -> list[str]:
    head = ["family", "fraction", "test acc", f"PatchDrop {DROP_AT:g}", "shuffle 4x4", "shift 1 patch",
            "shift consistency", "attn dist layer 1 (px; uniform)", "attn dist last (px; uniform)",
            "last − first (px)",
            "pos table grid corr", "CKA last vs ResNet last"]
    table = []
    for r in rows:
        table.append([r["name"] + (f" {STILL_IMPROVING}" if r["still_improving"] else ""), f"{r['fraction']:g}",
                      _pm(r["acc"]),
                      _pm(r["patchdrop"]), _pm(r["shuffle4"]), _pm(r["shift_patch"]), _pm(r["consistency"]),
                      _with_uniform(r["dist_first"], r["uniform_first"]), _with_uniform(r["dist_last"], r["uniform_last"]),
                      _pm(r["dist_growth"], 1, signed=True),
                      _pm(r["grid"], 2), "—" if r["cka"] is None else f"{r['cka']:.2f}"])
    patch = p.axes.get("probe_patch")
    return ["### Probes per family", "",
            f"On the first {p.axes.get('probe_images')} test images, mean ± 95% t-interval over seeds. PatchDrop: "
            f"accuracy with {DROP_AT:.0%} of the {patch}x{patch}-pixel cells blanked black (mean of draws); shuffle "
            f"4x4: accuracy when the image cut into a 4x4 grid has its cells permuted; shift 1 patch: accuracy after a "
            f"diagonal shift of {patch} pixels (the uncovered border black); shift consistency: how often two random "
            f"shifts of up to {patch} pixels get the same class; — for PatchDrop and shifts where a run's probes "
            "blanked with the dataset's mean colour instead (an older probe: not read). Attention distance in input pixels (Swin: within its windows, so "
            "its stages are not comparable with a global ViT's layers), in brackets what uniform attention over "
            "the same keys gives (a head that has learned nothing); grid corr: Pearson correlation of the "
            "position table's patch-to-patch cosine similarity with minus their grid distance. "
            f"{STILL_IMPROVING} after a family: a run of the row was still improving at its last validation, so "
            "every number of the row is shown, not read.", "",
            *markdown_table(head, table, 2), "", *not_probed_line(p, rows)]


def _with_uniform(est: Estimate | None, uniform: Estimate | None) -> str:
    return _pm(est, 1) + (f" ({uniform.value:.1f})" if est is not None and uniform is not None else "")


def structure_text(r: dict) -> str:
    """A position table's neighbour against far similarity, mean ± 95% interval over seeds, and its 2D verdicts."""
    return (f"cosine of neighbours in a row {_pm(r['horizontal_mean'], 2)}, in a column {_pm(r['vertical_mean'], 2)}, "
            f"of far patches {_pm(r['far_mean'], 2)}: 2D in {sum(r['two_d'])} of {len(r['two_d'])} seeds")


def pos_table_section(p: Profile, ablations: list[dict]) -> list[str]:
    rows = [r for r in ablations if r["name"] in TABLES and r["two_d"]]
    if not rows:
        return []
    table = [[r["name"], _size_label(p, r["fraction"]), _pm(r["horizontal_mean"], 2), _pm(r["vertical_mean"], 2),
              _pm(r["far_mean"], 2), _pm(r["grid"], 2), f"{sum(r['two_d'])} of {len(r['two_d'])}"] for r in rows]
    return ["### Position tables: 2D structure", "",
            "The learned 1D table knows nothing of rows and columns; 2D structure must be learned from the images. "
            "Mean cosine similarity of the position embeddings of grid neighbours in the same row (next to each "
            "other in the 1D order too) and in the same column (a whole row apart in the 1D order), against far "
            "patches (grid distance 3 or more). A run's table has 2D structure when both kinds of neighbour lie "
            f"at least {STRUCTURE_MIN_GAP} above the far patches. Grid correlation: the Pearson correlation of "
            "similarity with minus the grid distance, shown for reference (it cannot see similarity that falls "
            "off within a patch or two). sincos is 2D by construction (a positive control).", "",
            *markdown_table(["table", "fraction", "row neighbours", "column neighbours", "far patches",
                             "grid correlation", "2D structure (seeds)"], table, 2), ""]


def _uniform_caveat(families: list[dict]) -> str:
    names = still_uniform(families)
    if not names:
        return ""
    return (f"every attention layer of {', '.join(names)} attends on average as far as uniform attention over "
            f"the same keys would (first and last layer within {UNIFORM_TOLERANCE:.0%}): no local heads have formed "
            "at this budget, so their tolerance of shuffling and what removing their position embedding costs say "
            "little about a learned locality bias. This is distance only: attention as far as uniform can still be "
            "concentrated on a few patches (the concentration reading).")


def locality_text(p: Profile, loc: dict, claim: Claim) -> str:
    per = "; ".join(f"{_size_label(p, f)} {_pm(e, 3)}" for f, e in loc["per_size"].items())
    return (f"{loc['family']}'s mean attention distance over the uniform-attention distance (mean of its layers; "
            f"1: uniform, below 1: local): {per}. Change from {_size_label(p, loc['small'])} to "
            f"{_size_label(p, loc['large'])}, paired by seed: {_pm(claim.estimate, 3, signed=True)}: " + claim.read())


def growth_text(p: Profile, r: dict, at: str) -> str:
    """A family row's attention growth with depth, its claim's verdict, its layer-1 heads' spread and
    its layers against uniform attention."""
    heads = r["first_heads"]
    spread = f"; layer-1 heads {min(heads):.1f}-{max(heads):.1f} px" if heads else ""
    rel = (f"; layer 1 at {r['rel_first'].value:.2f} and the last layer at {r['rel_last'].value:.2f} of "
           "the uniform-attention distance" if r["rel_first"] is not None else "")
    return f"{at} {_pm(r['dist_growth'], 1, signed=True)} px ({growth_claim(r).read()}{spread}{rel})"


def unsettled(p: Profile) -> str | None:
    """The sentence that stands in for this profile's readings while a run behind them still improves."""
    behind = {e["run"] for t in ("families", "ablations") for e in p.entries(t) if _test_acc(p.runs.get(e["run"]))}
    return not_read(sum(still_improving(p.runs[r]) for r in behind), len(behind))


def reading(p: Profile, ablations: list[dict], families: list[dict]) -> list[str]:
    out = ["### What the numbers say", ""]
    if unsettled(p):
        ablations, families, left = settled_rows(ablations, families)
        if not ablations and not families:
            return out + [f"- {unsettled(p)}", ""]
        out.append(f"- Not read: {', '.join(left)}, where a run was still improving at its last validation "
                   f"({STILL_IMPROVING}); each reading below rests only on rows whose runs all plateaued.")
    sizes = sorted({r["fraction"] for r in families})

    def at(r: dict) -> str:  # with several family sizes, every number says which size it is read at
        return f"{r['name']} at {_size_label(p, r['fraction'])}" if len(sizes) > 1 else r["name"]
    # 1. attention distance against depth
    att = [r for r in families if r["dist_growth"] is not None]
    if att:
        out.append("- **Attention distance with depth** (last layer − first, mean over heads): "
                   + "; ".join(growth_text(p, r, at(r)) for r in att)
                   + ". Near 1.00 of the uniform distance a layer's heads attend as far on average as uniform "
                   "attention would, below 1 they attend locally: a reading of distance only, which says nothing of "
                   "how concentrated attention is (read apart below). Swin's windows span 7, 14 and 28 pixels in its three stages, so its "
                   "distance grows with depth by construction. The ViT paper (Fig. 7 right) finds distance "
                   "growing with depth, with some heads global already in layer 1 and local heads rarer in "
                   "hybrids.")
    concentrated = concentration_text(p, families)
    if concentrated:
        out.append(f"- **Concentration of attention**, apart from its distance: {concentrated}")
    # 2. occlusion and shuffling: transformers against CNNs
    for key, what in (("patchdrop", f"PatchDrop {DROP_AT:g}"), ("shuffle4", "4x4 shuffle")):
        for size in sizes:  # families compared at one training-set size at a time
            rows = [r for r in families if r["fraction"] == size]
            rel, words = kept(rows, key)
            where = f" at {_size_label(p, size)}" if len(sizes) > 1 else ""
            if not rel and key == "patchdrop" and any(r["clean"] is not None for r in rows):
                out.append(f"- **Robustness to {what}**{where}: {OLDER_FILL}.")
            if rel:
                out.append(f"- **Robustness to {what}**{where} ({words}): "
                           + ", ".join(f"{f} {v:.2f}" for f, v in rel.items()) + ". Transformers more robust than "
                           f"CNNs? {robustness_text(robustness_claims(p, size, key, {r['name'] for r in rows}))}."
                           f"{_single_class_text(rows) if key == 'patchdrop' else ''} "
                           f"Published: {CLAIMS[f'robustness_{key}'].published}.")
    # 3. 2D structure of the learned tables
    learned = [r for r in ablations if r["name"] in ("learn", "learn2d") and r["two_d"]]
    if learned:
        out.append("- **2D structure of the learned position tables**: " + "; ".join(
            f"{r['name']} at {r['fraction']:g}: {structure_text(r)}" for r in learned)
            + ". The ViT paper (Fig. 7 left) finds its learned 1D table shows row and column structure after "
            "pre-training.")
    # 4. how much accuracy depends on the position embedding
    none = [(r, c) for r, c in position_claims(p, ablations) if c.converged]
    if none:
        out.append("- **ViT without a position embedding** (none − learn, paired by seed): " + "; ".join(
            f"at {_size_label(p, r['fraction'])} {_pm(c.estimate, signed=True)}{_pairs(r)} "
            f"({c.read()}; {size_against(c.estimate, c.wording.size)}{_steps_apart(ablations, r)})"
            for r, c in none)
            + f". The ViT paper: {none[0][1].wording.size:+.4f} (none − learned 1D, ImageNet 5-shot).")
    loc = locality(p)
    claim = locality_claim(p, loc) if loc else None
    if claim and not claim.converged:
        out.append(f"- **Locality against training-set size**: {claim.silence()}.")
    elif loc:
        out.append(f"- **Locality against training-set size**: {locality_text(p, loc, claim)}. The ViT paper (Fig. 7 "
                   "right, JFT-300M) finds local heads in the lower layers; Raghu et al. 2021 find that with less "
                   "pre-training data the lower layers do not learn to attend locally.")
    if _uniform_caveat(families):
        out.append(f"- **Caveat**: {_uniform_caveat(families)[0].upper()}{_uniform_caveat(families)[1:]}")
    return out + [""]


def _at_size(p: Profile, r: dict, families: list[dict]) -> str:
    return f" at {_size_label(p, r['fraction'])}" if len({x["fraction"] for x in families}) > 1 else ""


def concentration_text(p: Profile, families: list[dict]) -> str:
    """How concentrated attention is, apart from how far it reaches: each family's attention entropy
    over uniform attention's in its first and last layer, mean ± 95% interval over seeds (records
    probed before it was measured: "not recorded"), and the share of the last layer's [CLS] attention
    held by the top 10% of patches on the sample maps of the largest family size (0.10: uniform)."""
    entropy = [f"{r['name']}{_at_size(p, r, families)} layer 1 {_pm(r['entropy_first'], 2)}, last layer "
               f"{_pm(r['entropy_last'], 2)}" for r in families if r["entropy_first"] is not None]
    f, shares = p.fractions("families")[-1], []
    for fam in [r["name"] for r in families if r["fraction"] == f]:
        cell = p.probe_cell(fam, f)
        m = cell[min(cell)].get("attention_maps") if cell else None
        if m:
            shares.append(f"{fam} {_concentration(m['cls']):.2f} (seed {min(cell)})")
    if not entropy and not shares:
        return ""
    return ("attention entropy over uniform attention's (1: uniform, lower: on fewer patches): "
            + ("; ".join(entropy) or "not recorded (these probes predate it)")
            + (f". Share of the last layer's [CLS] attention held by the top 10% of patches at {_size_label(p, f)} "
               f"(0.10: uniform): {', '.join(shares)}" if shares else "") + ".")


def robustness_text(claims: list[tuple[str, str, Claim]]) -> str:
    """Each transformer − CNN difference of kept shares with its interval, its claim's verdict."""
    if not claims:
        return "no transformer-CNN comparison (a group is missing)"
    return "; ".join(f"{t} − {c}, paired by seed: {_pm(claim.estimate, 3, signed=True)}: {claim.read()}"
                     for t, c, claim in claims)


def robustness_verdict(claims: list[tuple[str, str, Claim]]) -> str:
    """In direction, every transformer − CNN claim read together (claim.read_together); in size,
    apart: each difference against the published one, where one exists. Silent ('') unless every
    claim is converged."""
    out = read_together([claim for _, _, claim in claims])
    if not out:
        return ""
    published = claims[0][2].wording.size
    if published is None:
        return f"{out}; in size: the paper gives no number to hold ours against"
    return f"{out}; " + "; ".join(f"{t} − {c} {size_against(claim.estimate, published)}" for t, c, claim in claims)


def _single_class_text(families: list[dict]) -> str:
    one = single_class(families)
    return (f" {', '.join(one)} {'answers' if len(one) == 1 else 'answer'} one class for {SINGLE_CLASS:.0%} or more "
            f"of the images with {DROP_AT:.0%} of the cells dropped: {'its' if len(one) == 1 else 'their'} accuracy "
            "there is that class's share, not robustness." if one else "")


def _left_out(exp_dir: Path) -> list[str]:
    unreadable = read_runs(exp_dir)[1]
    return [f"- {left_out_line(unreadable)}", ""] if unreadable else []
