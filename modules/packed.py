"""K runs of ONE configuration trained at once in one LightningModule (torch.func).

Members differ only in their seed (initialisation, stochastic depth), their batches (each its own
subset, order and augmentation) and, when `lrs` is given, their peak learning rate. Their
parameters and buffers are stacked along a leading member dimension K (stack_module_state) and one
forward runs them all: torch.vmap(functional_call) over inputs (K, B, C, H, W). Each member gets
exactly what ImageClassifier gives one run: its loss (ImageClassifier.loss_from_outputs: label
smoothing, soft MixUp targets, DeiT's two heads and distillation against its own frozen teacher),
AdamW with the same no-decay groups, warmup + cosine, and gradient clipping by its OWN global norm.
BatchNorm running statistics are stacked buffers, updated in place per member under vmap.
Stochastic depth: member k draws its drop-path masks from its own generator, which starts where its
single run's global RNG stands after building the model (seed k, then initialisation) and draws the
same masks in the same order (timm's DropPath modules of the called network are swapped for
_MemberDropPath, which takes its mask as an input). The masks are drawn outside vmap: vmap's
randomness="different" would draw one (K, ...) tensor from ONE generator (member 0's seed in a
group), so every member's masks would depend on the group. The vmapped step runs with
randomness="error": any other random draw in it fails instead of mixing members. The generators'
states go into the group checkpoint (on_save_checkpoint), as a single run saves its global RNG.
Packing changes nothing: tests/test_packed.py checks losses and weights against single runs.

    packed = PackedClassifier(seeds=[0, 1, 2, 3], family="vit", budget="tiny")
    L.Trainer(max_steps=..., gradient_clip_val=1.0).fit(packed, loader)  # batches x (K, B, C, H, W), y (K, B)
    packed.save_member_checkpoint(2, "seed2.ckpt")  # for `python -m experiments test`, load_teacher
"""
from __future__ import annotations

import copy
from typing import Sequence

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import nn
from timm.layers import DropPath
from torch.func import functional_call, stack_module_state

from .checkpoint_io import atomic_save, read_checkpoint
from .classifier import ImageClassifier, load_teacher, students
from .optim import LR_LIMIT, lr_in_range, param_groups, warmup_cosine, warmup_steps
from .registry import use_fused_attention


class _MemberDropPath(DropPath):
    """timm's DropPath (timm.layers.drop.drop_path: same keep mask, scaling and dtype) with its
    keep mask `mask` (B,) given: drawn outside vmap from the member's own generator."""
    mask: torch.Tensor | None = None

    def forward(self, x):
        if self.drop_prob == 0. or not self.training:
            return x
        if self.mask is None:
            raise RuntimeError("_MemberDropPath: training forward without its member's mask")
        keep = 1 - self.drop_prob
        m = self.mask.to(x.dtype).view(x.shape[0], *[1] * (x.ndim - 1))  # as timm: x.new_empty((B, 1, ...))
        return x * (m / keep if keep > 0.0 and self.scale_by_keep else m)


class _Member(nn.Module):
    """One member as a function of its weights (for functional_call): the training loss and logits
    of ImageClassifier.loss_from_outputs, or the reported evaluation logits. masks (n, B): the keep
    masks of its drawing drop paths (`drop_paths`, in forward order), or None when there are none."""

    def __init__(self, clf: ImageClassifier):
        super().__init__()
        self.clf = clf  # its .model is the skeleton: weights come from functional_call ("clf.model.<name>")
        for name, m in list(clf.model.named_modules()):  # swap timm's DropPath: same rate, same place
            if type(m) is DropPath:
                owner, _, attr = name.rpartition(".")
                setattr(clf.model.get_submodule(owner), attr, _MemberDropPath(m.drop_prob, m.scale_by_keep))
        # those that draw (timm draws nothing at rate 0), in module order = forward order in timm's
        # blocks (drop_path1 after attn, drop_path2 after mlp); a plain list: not submodules twice
        self.drop_paths = [m for m in clf.model.modules() if isinstance(m, _MemberDropPath) and m.drop_prob > 0]

    def forward(self, x, y=None, teacher_logits=None, masks=None):
        if y is None:
            return self.clf._eval_logits(x)["avg"]
        for dp, m in zip(self.drop_paths, masks if masks is not None else ()):
            dp.mask = m
        try:
            return self.clf.loss_from_outputs(self.clf.model(x), y, teacher_logits)
        finally:  # no vmapped tensor outlives the call
            for dp in self.drop_paths:
                dp.mask = None


def clip_grad_norm_per_member(params: Sequence[torch.Tensor], max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for each member k on its own slices p.grad[k]. Returns the
    members' global gradient norms (K,) before clipping. No host sync."""
    grads = [p.grad for p in params if p.grad is not None]               # each (K, ...)
    k = grads[0].shape[0]
    norms = torch.stack([torch.linalg.vector_norm(g.reshape(k, -1), dim=1) for g in grads])  # (P, K)
    total = torch.linalg.vector_norm(norms, dim=0)                       # (K,)
    coef = (max_norm / (total + 1e-6)).clamp(max=1.0)                    # (K,) as clip_grad_norm_
    for g in grads:
        g.mul_(coef.to(g.dtype).view(k, *[1] * (g.ndim - 1)))
    return total


# ImageClassifier's arguments that decide a frozen teacher's forward (not its weights)
TEACHER_ARCHITECTURE = ("family", "budget", "num_classes", "image_size", "in_chans", "patch_size", "pos_embed",
                        "pool", "window_size", "allow_unshifted")


class PackedClassifier(L.LightningModule):
    """K members of one ImageClassifier configuration (`**config`: its arguments) with `seeds`.

    Batches: x (K, B, C, H, W), y (K, B) or soft (K, B, classes): member k trains on x[k], y[k].
    Validation batches may also be shared, x (B, C, H, W), y (B,). Gradient clipping comes from
    the Trainer's gradient_clip_val (norm), applied per member. DeiT members take their teachers
    from `teacher_checkpoints` (one per member, or one for all; not config's teacher_checkpoint).
    A member whose loss turns NaN is reported (`diverged`, checked at log steps, before validation
    and at epoch ends) and can no longer be exported; the others go on unaffected (no operation
    mixes members); training stops (FloatingPointError) when all have diverged.
    """

    def __init__(self, seeds: Sequence[int] = (0, 1, 2, 3), teacher_checkpoints: Sequence[str] | str | None = None,
                 lrs: Sequence[float] | None = None, **config):
        super().__init__()
        if config.get("teacher_checkpoint") is not None:
            raise ValueError("PackedClassifier: give teacher_checkpoints (one per member), not teacher_checkpoint")
        self.save_hyperparameters()
        self.seeds = [int(s) for s in seeds]
        if not self.seeds:
            raise ValueError("seeds=[]: allowed one integer per member, at least one")
        K = len(self.seeds)
        if lrs is not None and (len(lrs) != K or not all(lr_in_range(lr) for lr in lrs)):
            raise ValueError(f"lrs={list(lrs)}: allowed one learning rate > 0 per member ({K}), each {LR_LIMIT}")
        self.lrs = [float(lr) for lr in lrs] if lrs is not None else None
        members, rng = zip(*[_member(s, config) for s in self.seeds])
        # each member's stochastic-depth stream: where its single run's global RNG is after building
        # the model (CPU); see _generators for other devices
        self._rng_init, self._rng_saved, self._gens = list(rng), None, None
        template = members[0]
        use_fused_attention(template.model, False)  # the explicit path batches under vmap; SDPA loops over members
        self.is_deit, self.complexity = template.is_deit, template.complexity
        params, buffers = stack_module_state([m.model for m in members])  # name -> (K, ...)
        skeleton = copy.deepcopy(template.model).to("meta")              # structure only, no storage
        # The stacked weights live in member 0's network, its tensors replaced by the (K, ...)
        # stacks (never called): state_dict names are the network's; Lightning moves and saves them.
        self.members = template.model
        for name, t in params.items():
            _set(self.members, name, nn.Parameter(t.detach(), requires_grad=t.requires_grad), parameter=True)
        for name, t in buffers.items():
            _set(self.members, name, t, parameter=False)
        template.model = skeleton
        # outside the module tree: no parameters, not in state_dict, not moved (meta, never read)
        self.__dict__["member_fn"] = _Member(template)
        self.__dict__["template"] = template
        if isinstance(teacher_checkpoints, str):
            teacher_checkpoints = [teacher_checkpoints] * K
        if teacher_checkpoints is not None and len(teacher_checkpoints) != K:
            raise ValueError(f"teacher_checkpoints: {len(teacher_checkpoints)} given for {K} members")
        if teacher_checkpoints is not None and not self.is_deit:
            raise ValueError(f"teacher_checkpoints apply to family {students()} only")
        self.teacher_checkpoints = list(teacher_checkpoints) if teacher_checkpoints is not None else None
        self.teachers = None   # (skeleton, params, buffers) of the stacked frozen teachers, loaded on first use
        self.nan_step = self.nan_loss = None  # (K,) first step with a non-finite loss (-1: none), its loss
        self.diverged: dict[int, str] = {}  # member -> what happened (filled by check_finite)
        self._val_correct = self._val_count = None

    @property
    def num_members(self) -> int:
        return len(self.seeds)

    def member_lr(self, k: int) -> float:
        """Member k's peak learning rate."""
        return self.lrs[k] if self.lrs is not None else float(self.template.hparams.lr)

    # ---------------- forward ----------------
    def _weights(self) -> tuple[dict, dict]:
        ps = {f"clf.model.{n}": p for n, p in self.members.named_parameters()}
        bs = {f"clf.model.{n}": b for n, b in self.members.named_buffers()}
        return ps, bs

    def _generators(self, device: torch.device) -> list[torch.Generator]:
        """Each member's stochastic-depth generator on `device`, made at the first draw: restored
        from the group checkpoint; or fresh: on the CPU the single run's global RNG after building
        the model, elsewhere its device RNG as seed_everything(seed) left it (the model is built on
        the CPU, so nothing drew from it). Equality with the single run's masks is tested in CPU fp32;
        on a GPU, or where timm draws in bf16 (autocast), it is not checked: there each member's
        stream is its own and independent, not necessarily its single run's."""
        if self._gens is not None and self._gens[0].device == device:
            return self._gens
        saved = self._rng_saved
        if saved is not None and saved["device"] != device.type:
            raise ValueError(f"packed group: its checkpoint holds the members' {saved['device']} generators; "
                             f"allowed to resume on {saved['device']}, not {device.type}")
        gens = [torch.Generator(device) for _ in self.seeds]
        for k, g in enumerate(gens):
            if saved is not None:
                g.set_state(saved["states"][k])
            elif device.type == "cpu":
                g.set_state(self._rng_init[k])
            else:
                g.manual_seed(self.seeds[k])
        self._gens = gens
        return gens

    def _drop_path_masks(self, x: torch.Tensor) -> torch.Tensor | None:
        """(K, n, B) keep masks of the n drawing drop paths for x (K, B, ...), or None. Member k draws
        them from its own generator as its single run draws from the global RNG: in forward order,
        B values each, bernoulli_(keep) (equal values for (B,) and timm's (B, 1, ...))."""
        probs = [dp.drop_prob for dp in self.member_fn.drop_paths]
        if not probs or not self.training:
            return None
        return torch.stack([torch.stack([torch.empty(x.shape[1], device=x.device).bernoulli_(1 - p, generator=g)
                                         for p in probs]) for g in self._generators(x.device)])

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        # an exact resume continues each member's stochastic-depth stream (a single run saves its global RNG)
        if self._gens is not None:
            checkpoint["member_rng"] = {"device": self._gens[0].device.type,
                                        "states": [g.get_state() for g in self._gens]}
        elif self._rng_saved is not None:
            checkpoint["member_rng"] = self._rng_saved

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        self._rng_saved, self._gens = checkpoint.get("member_rng"), None

    def teacher_stack(self, device: torch.device) -> tuple | None:
        """The members' frozen teachers stacked on `device`: (meta skeleton, params, buffers), each
        tensor (K, ...); loaded on first use. None without distillation."""
        h = self.template.hparams
        if not self.is_deit or h.distillation == "none" or self.teacher_checkpoints is None:
            return None
        if self.teachers is None:
            nets = [load_teacher(p, h) for p in self.teacher_checkpoints]
            for net in nets:
                use_fused_attention(net, False)
            tp, tb = stack_module_state(nets)
            self.teachers = (copy.deepcopy(nets[0]).to("meta").eval(), tp, tb)
        skel, tp, tb = self.teachers
        if next(iter(tp.values())).device != device:
            tp, tb = ({n: t.to(device) for n, t in d.items()} for d in (tp, tb))
            self.teachers = (skel, tp, tb)
        return self.teachers

    def teacher_architectures(self) -> tuple:
        """Each teacher's architecture settings, from its checkpoint (what its forward computes besides
        its weights: a compiled step shared between groups holds them); () without teachers."""
        if self.teacher_stack(self.device) is None:
            return ()
        return tuple(tuple((k, repr(hp.get(k))) for k in TEACHER_ARCHITECTURE)
                     for hp in (read_checkpoint(p)["hyper_parameters"] for p in self.teacher_checkpoints))

    def _teacher_logits(self, x: torch.Tensor) -> torch.Tensor | None:
        """(K, B, classes) logits of each member's frozen teacher on its own images, or None."""
        stack = self.teacher_stack(x.device)
        return None if stack is None else teacher_logits(stack, x)

    def forward(self, x: torch.Tensor, y: torch.Tensor | None = None):
        """Training (y given): per-member (losses (K,), logits (K, B, classes)); x (K, B, C, H, W).
        Otherwise the reported logits (K, B, classes); x (K, B, C, H, W) or shared (B, C, H, W)."""
        self.member_fn.train(self.training)
        ps, bs = self._weights()
        if y is None:
            x = x.expand(self.num_members, *x.shape) if x.ndim == 4 else x  # shared images: a view
            return torch.vmap(lambda p, b, xk: functional_call(self.member_fn, (p, b), (xk,)),
                              randomness="error")(ps, bs, x)
        t = self._teacher_logits(x) if self.training else None
        masks = self._drop_path_masks(x)   # drawn here, per member: nothing random runs under vmap

        def one(p, b, xk, yk, tk, mk):  # one member: xk (B, C, H, W), yk (B,) or (B, classes), tk (B, classes), mk (n, B)
            return functional_call(self.member_fn, (p, b), (xk, yk, tk, mk))
        dims = (0, 0, 0, 0, None if t is None else 0, None if masks is None else 0)
        return torch.vmap(one, in_dims=dims, randomness="error")(ps, bs, x, y, t, masks)

    # ---------------- training ----------------
    def training_step(self, batch, batch_idx):
        x, y = batch                       # (K, B, C, H, W), (K, B) or (K, B, classes)
        losses, _ = self(x, y)             # (K,)
        self._watch_divergence(losses.detach())
        if self._trainer is not None and self.trainer._logger_connector.should_update_logs:
            lr = self.optimizers().param_groups[0]["lr"] * (self.lrs[0] if self.lrs is not None else 1.0)
            self.log("train/lr", lr, on_step=True, on_epoch=False)  # member 0's
            for k in range(self.num_members):
                self.log(f"train/loss_m{k}", losses[k].detach(), on_step=True, on_epoch=False, batch_size=x.shape[1])
        # members share no weights: the gradient of the sum is each member's own gradient
        return {"loss": losses.sum(), "losses": losses.detach()}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None) -> None:
        if gradient_clip_val and gradient_clip_algorithm in (None, "norm"):
            clip_grad_norm_per_member(list(self.members.parameters()), float(gradient_clip_val))
        else:  # by value: element-wise, the same for each member
            self.clip_gradients(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def configure_optimizers(self, total_steps: int | None = None):
        """AdamW + warmup/cosine over `total_steps` (default: the Trainer's estimate), as ImageClassifier."""
        h = self.template.hparams
        total = int(total_steps or self.trainer.estimated_stepping_batches)
        skeleton, stacked = self.template.model, dict(self.members.named_parameters())
        name = {id(p): n for n, p in skeleton.named_parameters()}
        groups = [{**g, "params": [stacked[name[id(p)]] for p in g["params"]]}  # the member's groups, stacked
                  for g in param_groups(skeleton, h.weight_decay)]
        # element-wise, so one AdamW over stacked tensors is K AdamWs; with per-member lrs it runs at
        # lr 1 and optimizer_step scales each member's update by its own lr
        optimizer = torch.optim.AdamW(groups, lr=1.0 if self.lrs is not None else h.lr, betas=tuple(h.betas))
        warmup = warmup_steps(total, h.warmup_fraction)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda s: warmup_cosine(s, total, warmup, h.min_lr_ratio))
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def optimizer_step(self, epoch, batch_idx, optimizer, optimizer_closure=None) -> None:
        """With per-member lrs: AdamW's update is linear in lr (p <- p - lr (wd p + m/(sqrt(v) + eps))),
        so the step taken at lr = schedule(t) and scaled by lr_k is member k's step at lr_k schedule(t)."""
        if self.lrs is None:
            return super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        params = list(self.members.parameters())
        before = [p.detach().clone() for p in params]
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
        scale = self.__dict__.get("_lr_scale")
        if scale is None or scale.device != params[0].device:  # made once: a copy per step would wait for the GPU
            scale = self.__dict__["_lr_scale"] = torch.tensor(self.lrs, device=params[0].device)  # (K,)
        with torch.no_grad():
            for p, b in zip(params, before):
                p.copy_(torch.lerp(b, p, scale.view(-1, *[1] * (p.ndim - 1)).to(p.dtype)))  # b + lr_k (p - b)

    # ---------------- divergence (device flag, host check at log steps / validation / saves) ----------------
    def _watch_divergence(self, losses: torch.Tensor) -> None:
        if self.nan_step is None:
            self.nan_step, self.nan_loss = torch.full_like(losses, -1, dtype=torch.long), torch.zeros_like(losses)
        first = ~torch.isfinite(losses) & (self.nan_step < 0)                # (K,) no host sync
        self.nan_step = torch.where(first, self.global_step, self.nan_step)
        self.nan_loss = torch.where(first, losses, self.nan_loss)

    def check_finite(self) -> None:
        """Record members whose loss was not finite (one host sync); raise when all have diverged."""
        if self.nan_step is None:
            return
        for k, (step, loss) in enumerate(zip(self.nan_step.tolist(), self.nan_loss.tolist())):
            if step >= 0 and k not in self.diverged:
                self.diverged[k] = f"diverged: loss is {loss} at step {step}"
                rank_zero_warn(f"packed member {k} (seed {self.seeds[k]}) {self.diverged[k]}")
        if len(self.diverged) == self.num_members:
            raise FloatingPointError(f"all {self.num_members} members {self.diverged[0]} (member 0)")

    def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
        if self.trainer._logger_connector.should_update_logs:
            self.check_finite()

    def on_train_epoch_end(self) -> None:
        self.check_finite()

    # ---------------- validation: accuracy of each member ----------------
    def validation_step(self, batch, batch_idx):
        x, y = batch                                  # (K, B, ...), (K, B) or shared (B, ...), (B,)
        logits = self(x)                              # (K, B, classes)
        correct = (logits.argmax(-1) == y).sum(-1)    # (K,)
        n = torch.full_like(correct, logits.shape[1])
        self._val_correct = correct if self._val_correct is None else self._val_correct + correct
        self._val_count = n if self._val_count is None else self._val_count + n

    def on_validation_start(self) -> None:
        self.check_finite()

    def on_validation_epoch_end(self) -> None:
        if self._val_correct is None:
            return
        acc = self._val_correct.float() / self._val_count    # (K,)
        for k in range(self.num_members):
            self.log(f"val/acc_m{k}", acc[k])
        self.log("val/acc_mean", acc.mean(), prog_bar=True)
        self._val_correct = self._val_count = None

    # ---------------- export ----------------
    def member_state_dict(self, k: int) -> dict[str, torch.Tensor]:
        """Member k's network weights (build_model's names and shapes; copies on the CPU)."""
        return {n: t[k].detach().cpu().clone() for n, t in self.members.state_dict().items()}

    def save_member_checkpoint(self, k: int, path, hparams: dict | None = None, extra: dict | None = None) -> None:
        """A checkpoint of member k as ImageClassifier writes one (state_dict "model.*" and
        hyper_parameters): ImageClassifier.load_from_checkpoint, load_teacher and
        `python -m experiments test --ckpt_path` accept it. hparams: overrides of the member's
        hyper-parameters (default: the configuration; a DeiT member records its teacher). extra: more
        top-level entries (e.g. val_acc_best)."""
        self.check_finite()
        if k in self.diverged:
            raise FloatingPointError(f"member {k} (seed {self.seeds[k]}) {self.diverged[k]}: no checkpoint")
        hp = dict(self.template.hparams)
        hp["lr"] = self.member_lr(k)
        if self.teacher_checkpoints is not None:
            hp["teacher_checkpoint"] = str(self.teacher_checkpoints[k])
        hp.update(hparams or {})
        atomic_save({"state_dict": {f"model.{n}": t for n, t in self.member_state_dict(k).items()},
                    "hyper_parameters": hp, "hparams_name": "kwargs", "complexity": self.complexity,
                    "val_acc_best": None, "epoch": self.current_epoch, "global_step": self.global_step,
                    "pytorch-lightning_version": L.__version__, "packed": {"member": k, "seed": self.seeds[k]},
                    **(extra or {})}, path)


def teacher_logits(stack: tuple, x: torch.Tensor) -> torch.Tensor:
    """(K, B, classes): each member's teacher (`stack`: PackedClassifier.teacher_stack) on its own
    images x (K, B, C, H, W), without gradients."""
    skel, tp, tb = stack
    with torch.no_grad():
        return torch.vmap(lambda p, b, xk: functional_call(skel, (p, b), (xk,)))(tp, tb, x)


def _member(seed: int, config: dict) -> tuple[ImageClassifier, torch.Tensor]:
    """As a single run: seed, then ImageClassifier; and the global RNG state it leaves, from which
    that run's stochastic depth draws (the global RNG is left as it was). Outside the class:
    Lightning's save_hyperparameters would also collect PackedClassifier's arguments."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return ImageClassifier(**config), torch.get_rng_state()


def _set(module: nn.Module, name: str, value: torch.Tensor, parameter: bool) -> None:
    """Replace the parameter or buffer `name` ("blocks.0.attn.qkv.weight") of `module` in place."""
    owner, _, attr = name.rpartition(".")
    m = module.get_submodule(owner)
    (m._parameters if parameter else m._buffers)[attr] = value
