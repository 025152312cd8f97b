"""The bad-input battery: every case a hostile but fair user might type, with the words its one
error line must hold. tests/test_messages.py runs each case in-process; tests/safety_battery.py
(`make safety`) runs each against the real CLI as its own process and prints a row per case.

A case is (command, arguments, expected substrings). `{name}` in an argument or an expected text is
a path the battery makes beforehand (see `Scene`): fmnist (small IDX data), runs (the private
runs_dir, empty), file (a plain file), images (a class folder without images), badimg (a class
folder with a truncated PNG), mixed (class folders of images of two sizes), lonely (a class
folder of one image), yaml (a malformed YAML file), spec (a tiny sweep spec), evil (a torch
checkpoint whose unpickling would create the file `pwned`), evil_raw (the same as a bare pickle),
pwned (that file), out (a folder outside runs), plants (a folder to put on the import path, holding
a module h3evil whose import creates `pwned`), evil_config and evil_spec (a config file and a sweep
spec whose trainer.callbacks names h3evil), evil_distill and evil_ib (a distill and an inductive_bias
spec with one variant whose trainer.callbacks names h3evil), alpha_distill, erase_ib and erase_spec
(a distill, inductive_bias and sweep spec with one variant whose value fit refuses), run (a run folder from elsewhere: its config.yaml is
a suite config with a case's `run_config` entries, beside an included file naming h3evil), victim and
victim_dir (a file and a folder outside runs that a planted link points at: their bytes must stay).
"""
from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import yaml
from PIL import Image

from tests.conftest import SMOKE, make_images, write_idx

TINY_SPEC = {"name": "tiny", "dataset": "fashion_mnist", "families": ["vit"], "variant_args": {"default": {}},
             "profiles": {"cpu": {"budget": "tiny", "fractions": [1.0], "seeds": [0], "epochs": 0.1,
                                  "min_steps": 4, "val_checks": 2, "lrs": [0.003]}}}

# the distill and inductive_bias runners' tiny specs, each with a variant naming h3evil: its first stage
# (tuning) would train before the runner reaches that variant's stage
TINY_DISTILL = {"name": "distill", "runner": "distill", "dataset": "fashion_mnist", "student": "deit",
                "variants": {"none": {"model.distillation": "none"},
                             "hard": {"model.distillation": "hard", "trainer.callbacks": "h3evil.Cb"}},
                "profiles": {"cpu": {"teachers": ["resnet"], "students": ["none", "hard/resnet"], "budget": "tiny",
                                     "fractions": [1.0], "seeds": [0], "epochs": 0.1, "min_steps": 4, "val_checks": 2,
                                     "lrs": [0.003], "probe_images": 16, "jobs": 1}}}
TINY_IB = {"name": "inductive_bias", "runner": "inductive_bias", "dataset": "fashion_mnist", "ablated": "vit",
           "ablations": {"learn": {}, "none": {"model.pos_embed": "none", "trainer.callbacks": "h3evil.Cb"}},
           "profiles": {"cpu": {"families": ["resnet", "vit"], "family_fractions": [1.0],
                                "ablations": {"learn": [1.0], "none": [1.0]}, "budget": "tiny", "seeds": [0],
                                "epochs": 0.1, "min_steps": 4, "val_checks": 2, "lrs": [0.003], "probe_images": 16,
                                "probes": {"families": ["robustness"], "ablations": []}, "jobs": 1}}}
EXPERIMENT_RUNNERS = ("sweep", "distill", "inductive_bias")  # commands that plan a spec's runs


# fit, validate and test: the smoke config on the small data; a sweep: the tiny spec
FIT_BASE = ("--config", SMOKE, "--data.data_dir", "{fmnist}", "--runs_dir", "{runs}", "--trainer.enable_progress_bar",
            "false")
SWEEP_BASE = ("--spec", "{spec}", "--runs_dir", "{runs}")


@dataclass(frozen=True)
class Case:
    command: str
    args: tuple[str, ...]
    expected: tuple[str, ...]
    plant: str | None = None  # the planted pickle goes here, inside the folder `fit` would use
    run_config: tuple[tuple[str, object], ...] = ()  # entries of {run}/config.yaml: (section or dotted key, value)
    link: tuple[str, str] | None = None  # (where, scene path): a symbolic link planted in that folder (a sweep's:
    # its experiment folder), pointing outside runs

    def folder(self, scene: "Scene") -> Path:
        """The folder this case's command writes in: the run folder of a fit, the experiment folder of a sweep."""
        if self.command in EXPERIMENT_RUNNERS:
            return scene.paths["runs"] / {"sweep": TINY_SPEC, "distill": TINY_DISTILL, "inductive_bias": TINY_IB}[
                self.command]["name"]
        from experiments.runs.run.cli import resolve_run_dirs
        return resolve_run_dirs([self.argv(scene)[1:]])[0]

    def argv(self, scene: "Scene") -> list[str]:
        base = {"sweep": SWEEP_BASE, "probe": (), "distill": (), "inductive_bias": ()}.get(self.command, FIT_BASE)
        return [self.command, *(scene.fill(a) for a in (*base, *self.args))]

    def words(self, scene: "Scene") -> list[str]:
        return [scene.fill(e) for e in self.expected]

    @property
    def label(self) -> str:
        planted = " ".join(f"{k}={v!r}" for k, v in self.run_config)
        linked = (f"[link {self.link[0]} -> {self.link[1]}]",) if self.link else ()
        return " ".join((self.command, *self.args, *linked)) + (f" [config.yaml: {planted}]" if planted else "")


DENIED = "{key} names '{name}', which the suite does not import: allowed classes from lightning"
ALLOWED_NAME = "allowed a single folder name of letters, digits, '.', '_' and '-', at most 100 characters"


def fit(*args: str, expect: tuple[str, ...] | str) -> Case:
    return Case("fit", args, (expect,) if isinstance(expect, str) else expect)


FIT = [
    fit("--data.fraction", "abc", expect=("data.fraction='abc'", "allowed a float")),
    fit("--model.foo", "1", expect=("unknown key 'model.foo'", "allowed model.family, model.budget")),
    fit("--model.familly", "vit", expect=("unknown key 'model.familly' (did you mean 'model.family'?)",
                                          "allowed model.family")),
    fit("--data.seed", "-1", expect=("seed=-1", "allowed integers >= 0")),
    fit("--data.split_seed", "-1", expect=("split_seed=-1", "allowed integers >= 0")),
    fit("--seed_everything", "-1", expect=("seed_everything=-1", "allowed true, false or integers 0..4294967295")),
    fit("--trainer.max_steps", "0", expect=("trainer.max_steps=0", "allowed -1 (no limit) or integers >= 1")),
    fit("--trainer.max_epochs", "0", expect=("trainer.max_epochs=0", "allowed -1 (no limit) or integers >= 1")),
    fit("--trainer.max_steps", str(2**63), expect=(f"trainer.max_steps={2**63}", "integers >= 1 and <= 2**53")),
    fit("--trainer.max_steps", "-1", "--trainer.max_epochs", "-1",
        expect=("trainer.max_steps=-1 with trainer.max_epochs=-1", "allowed a limit on either")),
    fit("--runs_dir", "", expect="runs_dir='': allowed a folder path"),
    fit("--data.train_size", "null", "--data.fraction", "1e-9",
        expect=("fraction=1e-09 leaves 1 training image(s) of a pool of 540, fewer than its 10 classes",
                "allowed fractions >= 10/540")),
    fit("--data.dataset", "{images}", expect=("class folder '{images}/dog' holds no images", "allowed image files",
                                              ".png")),
    fit("--data.dataset", "{mixed}", expect=("image file '{mixed}/dog/0.png' is 10x8 (width x height), "
                                             "'{mixed}/cat/0.png' is 8x8", "allowed images of one size, or "
                                             "--data.resize_to N")),
    fit("--data.dataset", "{lonely}", expect=("class folder '{lonely}/dog' holds 1 image",
                                              "allowed at least 2 per class", "held out for test")),
    fit("--runs_dir", "{file}/runs", expect=("cannot write to runs_dir '{file}/runs'", "is not a folder")),
    fit("--model.family", "deit", "--model.teacher_checkpoint", "{file}",
        expect="teacher_checkpoint '{file}' is not a readable checkpoint of this suite"),
    fit("--model.family", "deit", "--model.teacher_checkpoint", "{file}.missing",
        expect="teacher_checkpoint '{file}.missing' does not exist"),
    fit("--model.lr", "-1", expect="lr=-1.0: allowed a learning rate > 0"),
    fit("--model.lr", "1e300", expect=("lr=1e+300: allowed a learning rate > 0 and <= 3.4e+38", "float32's largest")),
    fit("--model.weight_decay", "-1", expect="weight_decay=-1.0: allowed a float >= 0"),
    fit("--model.min_lr_ratio", "2", expect="min_lr_ratio=2.0: allowed the final lr as a share of the peak, in [0, 1]"),
    fit("--model.betas", "[2, 3]", expect="betas=[2.0, 3.0]: allowed two AdamW decay rates in [0, 1)"),
    fit("--model.family", "deit", "--model.distill_alpha", "2",
        expect="distill_alpha=2.0: allowed the distillation loss's weight in [0, 1]"),
    fit("--model.family", "deit", "--model.distill_tau", "0", expect="distill_tau=0.0: allowed a softmax temperature > 0"),
    fit("--trainer.accumulate_grad_batches", "0",
        expect="trainer.accumulate_grad_batches=0: allowed integers >= 1 (batches per optimiser step)"),
    fit("--data.resize_to", "0", expect="resize_to=0: allowed a size in pixels from 1 to 4096, or null for the native size"),
    fit("--data.resize_to", "-3", expect="resize_to=-3: allowed a size in pixels from 1 to 4096"),
    # names: one path component of safe characters, never a way out of runs_dir
    fit("--run_name", "../../x", expect=("run_name='../../x' is not valid", ALLOWED_NAME)),
    fit("--run_name", "a/b", expect="run_name='a/b' is not valid"),
    fit("--run_name", "x" * 300, expect=f"run_name='{'x' * 300}' is not valid"),
    fit("--run_name", ".hidden", expect="run_name='.hidden' is not valid"),
    fit("--experiment", "../../x", expect=("experiment='../../x' is not valid", ALLOWED_NAME)),
    fit("--experiment", "{out}", expect="experiment='{out}' is not valid"),
    # values outside their range, refused before any folder is made
    fit("--data.batch_size", "0", expect="batch_size=0: allowed integers >= 1"),
    fit("--trainer.val_check_interval", "0", expect=("trainer.val_check_interval=0: allowed a float in (0, 1]",
                                                      "or an integer >= 1")),
    fit("--trainer.max_steps", "6", "--trainer.val_check_interval", "1000", "--trainer.check_val_every_n_epoch",
        "null", expect="trainer.val_check_interval=1000 with trainer.max_steps=6: allowed at most max_steps"),
    fit("--model.label_smoothing", "1.0", expect="label_smoothing=1.0: allowed [0, 1)"),
    fit("--model.label_smoothing", "-0.1", expect="label_smoothing=-0.1: allowed [0, 1)"),
    fit("--data.crop_padding", "-1", expect="crop_padding=-1: allowed integers from 0 (no random crop) to 4096"),
    fit("--data.mixup_alpha", "-1", expect="mixup_alpha=-1.0: allowed a float >= 0"),
    fit("--data.cutmix_alpha", "-1", expect="cutmix_alpha=-1.0: allowed a float >= 0"),
    fit("--model.warmup_fraction", "1.5", expect="warmup_fraction=1.5: allowed a share of the steps in [0, 1]"),
    fit("--model.warmup_fraction", "-0.1", expect="warmup_fraction=-0.1: allowed"),
    fit("--data.val_size", "10000", expect="val_size=10000: allowed integers in [1, 599] for a train split of 600"),
    fit("--model.family", "swin", "--model.window_size", "28",
        expect=("window_size=28: no stage of the grids [28, 14, 7] shifts", "allowed 7, 14", "allow_unshifted=true")),
    fit("--data.dataset", "{badimg}", "--data.train_size", "2", "--data.val_size", "1",
        expect=("is not a readable image", "{badimg}/dog/0.png")),
    fit("--config", "{yaml}", expect="{yaml}"),
    fit("--config", "{deep}", expect=("--config '{deep}' is not valid YAML: nested too deeply to read",)),
    # a checkpoint that would run code when unpickled: refused, named, and never run
    fit("--model.family", "deit", "--model.teacher_checkpoint", "{evil}", expect=("{evil}", "is refused")),
    fit("--model.family", "deit", "--model.teacher_checkpoint", "{evil_raw}", expect="{evil_raw}"),
    Case("fit", ("--model.family", "vit"), ("last.ckpt", "is refused"), plant="checkpoints/last.ckpt"),
    # a value naming code outside the trusted packages: refused before it is imported (import_policy.py)
    fit("--trainer.callbacks", "h3evil.Cb", expect=(DENIED.format(key="trainer.callbacks", name="h3evil.Cb"),
                                                   "VIT_FAMILIES_IMPORTS")),
    fit("--config", "{evil_config}", expect=DENIED.format(key="trainer.callbacks", name="h3evil.Cb")),
    fit("--trainer.logger", "h3evil.Logger", expect=DENIED.format(key="trainer.logger", name="h3evil.Logger")),
    fit("--trainer.callbacks+=LambdaCallback", "--trainer.callbacks.on_fit_start=h3evil.hook",
        expect=DENIED.format(key="trainer.callbacks", name="h3evil.hook")),
]


def linked(where: str, to: str = "victim") -> Case:
    """A fit whose run folder holds a symbolic link at `where` (a file it writes, or its checkpoints
    folder) to a file or folder outside runs: refused in one line naming the link, nothing written there."""
    return Case("fit", (), (f"/{where}' is a symbolic link to '{{{to}}}'", "allowed plain files and folders"),
                link=(where, to))


# a run folder from elsewhere with links planted where the suite writes: no write leaves the folder
FIT += [linked(".lock"), linked("config.yaml"), linked("summary.json.tmp"), linked("train_indices.json"),
        linked("checkpoints/last.ckpt.tmp"), linked("checkpoints/best.ckpt.tmp"),
        linked("checkpoints", to="victim_dir")]

TEST = [
    Case("test", (), ("ckpt_path=None: test needs --ckpt_path",)),
    Case("validate", (), ("ckpt_path=None: validate needs --ckpt_path",)),
    Case("test", ("--ckpt_path", "{evil}"), ("{evil}", "is refused")),
    Case("test", ("--ckpt_path", "{evil_raw}"), ("{evil_raw}",)),
    Case("test", ("--ckpt_path", "{fmnist}"), ("ckpt_path '{fmnist}' is a folder: allowed a checkpoint file",)),
    # run_dir prints a path others build on ($(python -m experiments run_dir ...)): a typo is an error
    Case("run_dir", ("--model.family", "bogus"), ("unknown family 'bogus': allowed vit, deit",)),
    Case("run_dir", ("--data.fraction", "7"), ("fraction=7.0 is outside (0, 1]",)),
    Case("run_dir", ("--model.patch_size", "0"), ("patch_size=0: allowed an integer >= 1 that divides the image size",)),
    Case("run_dir", ("--model.patch_size", "-4"), ("patch_size=-4: allowed an integer >= 1",)),
    Case("run_dir", ("--model.distillation", "bogus"), ("distillation='bogus': allowed hard, soft, none",)),
    Case("run_dir", ("--data.resize_to", "100000"), ("resize_to=100000: allowed a size in pixels from 1 to 4096",)),
    Case("run_dir", ("--data.crop_padding", "100000"), ("crop_padding=100000: allowed integers from 0",)),
    Case("probe", ("{run}", "--seed", "-1"), ("--seed -1: allowed integers from 0 to 2**32 - 1",)),
    # a run folder from elsewhere: its config.yaml is read as plain values, never as a parser's config
    *(Case(command, ("--ckpt_path", "{run}/checkpoints/best.ckpt"),
           ("run config '{run}/config.yaml' has trainer='trainer_part.yaml'", "no included file"),
           run_config=(("trainer", "trainer_part.yaml"),)) for command in ("test", "validate")),
    Case("probe", ("{run}",), ("run config '{run}/config.yaml' has data='trainer_part.yaml'", "no included file"),
         run_config=(("data", "trainer_part.yaml"),)),
    Case("test", ("--ckpt_path", "{run}/checkpoints/best.ckpt"),
         ("run config '{run}/config.yaml' has model.lr={{'class_path': 'h3evil.Cb'}}: allowed a float",),
         run_config=(("model.lr", {"class_path": "h3evil.Cb"}),)),
    Case("test", ("--ckpt_path", "{run}/checkpoints/best.ckpt"),
         ("run config '{run}/config.yaml' has unknown key 'callbacks'",), run_config=(("callbacks", ["h3evil.Cb"]),)),
]

SWEEP = [
    Case("sweep", ("--jobs", "0"), ("--jobs 0: allowed integers >= 1",)),
    Case("sweep", ("--jobs", "-3"), ("--jobs -3: allowed integers >= 1",)),
    Case("sweep", ("--jobs", "abc"), ("argument --jobs: invalid int value: 'abc'",)),
    Case("sweep", ("--seeds", "-1"), ("seed -1 is negative: allowed integers >= 0",)),
    Case("sweep", ("--spec", "{deep}"), ("spec '{deep}' is not valid YAML: nested too deeply to read",)),
    Case("sweep", ("--runs_dir", "{file}/runs"), ("cannot write to runs_dir '{file}/runs'", "is not a folder")),
    Case("sweep", ("--runs_dir", ""), ("runs_dir='': allowed a folder path",)),
    Case("sweep", ("--spec", "{evil_spec}"),
         (DENIED.format(key="trainer.callbacks", name="h3evil.Cb"),)),
    # a variant of a later stage (a student, an ablation) is planned before the first stage trains
    Case("distill", ("--spec", "{evil_distill}", "--runs_dir", "{runs}"),
         (DENIED.format(key="trainer.callbacks", name="h3evil.Cb"),)),
    Case("inductive_bias", ("--spec", "{evil_ib}", "--runs_dir", "{runs}"),
         (DENIED.format(key="trainer.callbacks", name="h3evil.Cb"),)),
    # a variant's value that `fit` refuses when it builds the model or the data: checked when planned
    Case("distill", ("--spec", "{alpha_distill}", "--runs_dir", "{runs}"),
         ("variant 'hard-resnet' of deit: distill_alpha=2.0: allowed the distillation loss's weight in [0, 1]",)),
    Case("inductive_bias", ("--spec", "{erase_ib}", "--runs_dir", "{runs}"),
         ("variant 'none' of vit: random_erasing=2.0 is a probability: allowed [0, 1]",)),
    Case("sweep", ("--spec", "{erase_spec}"), ("variant 'default' of vit: random_erasing=2.0 is a probability",)),
    # the launcher (experiments/runs/sweep/slurm.py)
    Case("sweep", ("--launcher", "pbs"), ("argument --launcher: invalid choice: 'pbs'", "slurm", "submitit-local")),
    Case("sweep", ("--no_wait",), ("--no_wait with --launcher local: allowed with --launcher slurm or submitit-local",)),
    Case("sweep", ("--launcher", "slurm", "--retries", "-1"), ("--retries -1: allowed an integer >= 0",)),
    Case("sweep", ("--launcher", "slurm", "--time_min", "0"), ("--time_min 0: allowed an integer >= 1",)),
    # the experiment folder's lock, and a link anywhere in it (a run's log, the packed groups' folder)
    Case("sweep", (), ("/tiny/.lock' is a symbolic link to '{victim}'",), link=(".lock", "victim")),
    Case("sweep", (), ("/some_run/log.txt' is a symbolic link",), link=("some_run/log.txt", "victim")),
    Case("sweep", (), ("/tiny/packed' is a symbolic link to '{victim_dir}'",), link=("packed", "victim_dir")),
]

CASES = FIT + TEST + SWEEP


class Scene:
    """The files a case may name, made once under `root`; `runs` is emptied per case by the caller."""

    def __init__(self, root: Path, fmnist: Path | None = None):
        self.root = root
        self.paths = {"runs": root / "runs", "file": root / "file", "yaml": root / "bad.yaml", "deep": root / "deep.yaml",
                      "spec": root / "tiny.yaml", "evil": root / "evil.ckpt", "evil_raw": root / "raw.ckpt", "pwned": root / "pwned",
                      "out": root / "outside", "plants": root / "plants", "evil_config": root / "evil_config.yaml",
                      "evil_spec": root / "evil_spec.yaml", "evil_distill": root / "evil_distill.yaml",
                      "evil_ib": root / "evil_ib.yaml", "alpha_distill": root / "alpha_distill.yaml",
                      "erase_ib": root / "erase_ib.yaml", "erase_spec": root / "erase_spec.yaml", "run": root / "elsewhere" / "r_0a1b2c3d",
                      "victim": root / "victims" / "victim.txt", "victim_dir": root / "victims" / "folder"}
        self.paths["fmnist"] = fmnist or self._fmnist(root / "fashion-mnist")
        self.paths["images"] = self._image_folder(root / "images")
        self.paths["badimg"] = self._image_folder(root / "badimg", truncated=True)
        self.paths["mixed"] = self._image_folder(root / "mixed", dog=((8, 10), (8, 10)))
        self.paths["lonely"] = self._image_folder(root / "lonely", dog=((8, 8),))
        self.paths["file"].write_text("a file, not a folder")
        self.paths["yaml"].write_text("model: [unclosed\n")
        self.paths["deep"].write_text("[" * 200_000 + "]" * 200_000)  # deeper than the parser's recursion goes
        self.paths["victim_dir"].mkdir(parents=True)
        self.paths["victim"].write_text("a file outside runs: a write through a link must not reach it\n")
        (self.paths["victim_dir"] / "kept.txt").write_text("a file in a folder outside runs\n")
        self.paths["spec"].write_text(yaml.safe_dump(TINY_SPEC))
        # the attack in torch's own file format (what a shared .ckpt is), and as a bare pickle
        torch.save({"state_dict": {}, "hyper_parameters": _Planted(str(self.paths["pwned"]))}, self.paths["evil"])
        self.paths["evil_raw"].write_bytes(pickle.dumps(_Planted(str(self.paths["pwned"]))))
        self._run_from_elsewhere()

    def _run_from_elsewhere(self) -> None:
        """{plants}/h3evil.py, whose import creates `pwned`, and {run}: a checkpoint (never reached by
        a case) and trainer_part.yaml, a trainer section naming h3evil."""
        self.paths["plants"].mkdir()
        (self.paths["plants"] / "h3evil.py").write_text(
            f"from pathlib import Path\nPath({str(self.paths['pwned'])!r}).touch()\n"
            "from lightning.pytorch.callbacks import Callback\nclass Cb(Callback):\n    pass\n")
        (self.paths["run"] / "checkpoints").mkdir(parents=True)
        torch.save({"state_dict": {}, "hyper_parameters": {}}, self.paths["run"] / "checkpoints" / "best.ckpt")
        (self.paths["run"] / "trainer_part.yaml").write_text(yaml.safe_dump({"callbacks": ["h3evil.Cb"]}))
        self.paths["evil_config"].write_text(yaml.safe_dump({"trainer": {"callbacks": [{"class_path": "h3evil.Cb"}]}}))
        self.paths["evil_spec"].write_text(yaml.safe_dump(
            {**TINY_SPEC, "variant_args": {"default": {"trainer.callbacks": "h3evil.Cb"}}}))
        self.paths["evil_distill"].write_text(yaml.safe_dump(TINY_DISTILL))
        self.paths["evil_ib"].write_text(yaml.safe_dump(TINY_IB))
        hard = {"model.distillation": "hard", "model.distill_alpha": 2.0}
        self.paths["alpha_distill"].write_text(yaml.safe_dump({**TINY_DISTILL, "variants": {
            **TINY_DISTILL["variants"], "hard": hard}}))
        self.paths["erase_ib"].write_text(yaml.safe_dump({**TINY_IB, "ablations": {
            "learn": {}, "none": {"model.pos_embed": "none", "data.random_erasing": 2.0}}}))
        self.paths["erase_spec"].write_text(yaml.safe_dump({**TINY_SPEC, "variant_args": {
            "default": {"data.random_erasing": 2.0}}}))

    def write_run_config(self, entries: tuple[tuple[str, object], ...]) -> None:
        """{run}/config.yaml: a suite config with `entries` set (a section's whole value, or one key)."""
        cfg = {"seed_everything": 0, "trainer": {"precision": None, "logger": None, "callbacks": None},
               "model": {"family": "resnet", "budget": "tiny", "lr": 0.003},
               "data": {"dataset": "fashion_mnist", "data_dir": str(self.paths["fmnist"])}, "experiment": "t"}
        for key, value in entries:
            section, _, name = key.rpartition(".")
            (cfg[section] if section else cfg)[name] = value
        (self.paths["run"] / "config.yaml").write_text(yaml.safe_dump(cfg))

    def fill(self, text: str) -> str:
        return text.format(**{k: str(v) for k, v in self.paths.items()})

    def plant(self, case: Case) -> None:
        """The case's attack, in the very folder its command writes in: a pickle that runs code, or a link out."""
        if case.plant:
            target = case.folder(self) / case.plant
            target.parent.mkdir(parents=True)
            target.write_bytes(self.paths["evil"].read_bytes())
        if case.link:
            where, to = case.link
            link = case.folder(self) / where
            link.parent.mkdir(parents=True)
            link.symlink_to(self.paths[to])

    @staticmethod
    def _fmnist(d: Path) -> Path:
        d.mkdir(parents=True, exist_ok=True)
        for prefix, n, seed in (("train", 600, 0), ("t10k", 200, 1)):
            images, labels = make_images(n, 10, seed)
            write_idx(d / f"{prefix}-images-idx3-ubyte.gz", images[..., 0])
            write_idx(d / f"{prefix}-labels-idx1-ubyte.gz", labels)
        return d

    @staticmethod
    def _image_folder(root: Path, truncated: bool = False, dog: tuple = ()) -> Path:
        """cat/ holds four 8x8 images; dog/ holds only a text file, or (truncated) a PNG cut in half,
        or images of the (height, width)s in `dog`."""
        for name in ("cat", "dog"):
            (root / name).mkdir(parents=True, exist_ok=True)
        for i in range(4):
            Image.fromarray(np.full((8, 8), 40 * i, dtype=np.uint8)).save(root / "cat" / f"{i}.png")
        for i, shape in enumerate(dog or ((8, 8),) * truncated):
            Image.fromarray(np.full(shape, 9 + i, dtype=np.uint8)).save(root / "dog" / f"{i}.png")
        if truncated:
            whole = (root / "dog" / "0.png").read_bytes()
            (root / "dog" / "0.png").write_bytes(whole[:len(whole) // 2])
        elif not dog:
            (root / "dog" / "notes.txt").write_text("no images here")
        return root


class _Planted:
    """Unpickled, this would create the file at `path`: a stand-in for any shell command."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return Path.touch, (Path(self.path),)
