"""A packed group's whole training step as one pure function of static-shape tensors.

PackedClassifier trains its K members under Lightning's loop: autograd's backward, per-member
clipping, torch's AdamW at lr 1 and a clone + lerp per parameter for per-member learning rates,
with the step count and schedule on the host. `PackedStep` is the same step written for a loop
that owns it (issue #23): every input and output is a tensor of fixed shape, nothing is read back
to the host, so `torch.compile(step, fullgraph=True)` compiles it into one graph, and on CUDA the
graph can be captured once and replayed. It covers:

- the vmapped forward and backward: torch.func.grad of the sum of the members' losses
  (ImageClassifier's: label smoothing, DeiT's heads and distillation against the given teacher
  logits), vmapped over the members with randomness="error" (nothing random runs inside: drop-path
  keep masks come in); members share no weights, so each gets its own gradient;
- BatchNorm running statistics, updated per member (stacked buffers, returned);
- gradient clipping by each member's own global norm (clip_grad_norm_per_member's arithmetic);
- AdamW with decay on the weight matrices only (param_groups), each member's peak lr a (K,)
  tensor times warmup + cosine computed on the device from the step-count tensor.

- augmentation (datamodules.batch_augment.BatchAugment.apply: crop, flip, RandAugment, Random
  Erasing, MixUp/CutMix) on uint8 batches. The crop's and flip's numbers come in, drawn outside by
  each member's loader generator (a draw with generator= breaks the graph); the strong stages'
  numbers are drawn inside, for every member at once, by a counter-based generator
  (datamodules.counter_rng) from the members' seeds and settings (batch_augment.strong_inputs) and
  the batch's place: the numbers each member's single run draws, with a fixed number of host ops
  per step whatever the member count. Members of different variants pack (default and strong): a
  member's settings of a stage it leaves out are its defaults, which leave its images unchanged.

- with `teachers` (PackedClassifier.teacher_stack), DeiT's frozen teachers' forward on the members'
  augmented images, under the same autocast as the student's.

tests/test_packed_step.py: the step equals PackedClassifier's for every family, and compiled with
fullgraph=True equals itself eager.

    step = PackedStep(packed, total_steps=2000, clip=1.0)
    state = step.init_state()                       # weights, buffers, Adam moments, step count
    state, losses = step(state, x, y, lr)           # x (K, B, C, H, W), y (K, B), lr (K,)
    step = PackedStep(packed, 2000, augment=dm.augment)   # x uint8, plus draws (__call__)
    compiled = torch.compile(step, fullgraph=True)  # the same function, one graph
"""
from __future__ import annotations

import math

import torch
from torch.func import functional_call, grad

from .optim import param_groups, warmup_steps
from .packed import teacher_logits as teacher_logits_of


class PackedStep:
    """The training step of `packed`'s members (a PackedClassifier) over `total_steps` steps,
    clipping each member's gradient at `clip` (None: no clipping); with `augment` (a BatchAugment:
    the members' shared crop and flip settings, their data's normalisation and classes) the step
    takes uint8 batches and augments and normalises them itself."""

    def __init__(self, packed, total_steps: int, clip: float | None = 1.0, augment=None,
                 autocast: torch.dtype | None = None, teachers: tuple | None = None):
        self.augment = augment
        self.teachers = teachers  # PackedClassifier.teacher_stack: DeiT's teachers run inside the step
        self.autocast = autocast  # e.g. torch.bfloat16: the forward and backward under autocast (bf16-mixed)
        if augment is not None:  # its mean and std on the group's device once (build the step after moving `packed`)
            augment.to(packed.device)
        h = packed.template.hparams
        self.member_fn = packed.member_fn
        self.member_fn.train(True)
        self.packed = packed
        skeleton = packed.template.model
        name = {id(p): n for n, p in skeleton.named_parameters()}
        # weight decay of each parameter: its ImageClassifier group's (none for norms, biases, tokens)
        self.decay = {name[id(p)]: float(g["weight_decay"]) for g in param_groups(skeleton, h.weight_decay)
                      for p in g["params"]}
        self.beta1, self.beta2 = (float(b) for b in h.betas)
        self.eps = 1e-8                                   # torch.optim.AdamW's default
        self.total = int(total_steps)
        self.min_ratio = float(h.min_lr_ratio)
        self.clip = clip

    def schedule(self, total_steps: int | None = None, device=None) -> torch.Tensor:
        """(warmup steps, total steps) of a run of `total_steps` (default: this step's) as a tensor in
        the weights' precision: an input of the step, not a constant of its graph, so that groups
        that differ only in their length share one compiled step."""
        total = self.total if total_steps is None else int(total_steps)
        warmup = warmup_steps(total, self.packed.template.hparams.warmup_fraction)  # as configure_optimizers
        dtype = next(iter(self.packed.members.parameters())).dtype
        return torch.tensor([warmup, total], dtype=dtype, device=device or self.packed.device)

    def init_state(self, packed=None) -> dict:
        """The members' weights and buffers as they stand in `packed` (default: this step's; another
        group of the same configuration and member count can share this step), zero Adam moments,
        step 0 (copies: the step never writes into the module)."""
        packed = packed or self.packed
        params = {n: p.detach().clone() for n, p in packed.members.named_parameters() if n in self.decay}
        buffers = {n: b.detach().clone() for n, b in packed.members.named_buffers()}
        first = next(iter(params.values()))
        return {"params": params, "buffers": buffers, "exp_avg": {n: torch.zeros_like(p) for n, p in params.items()},
                "exp_avg_sq": {n: torch.zeros_like(p) for n, p in params.items()},
                "step": torch.zeros((), dtype=first.dtype, device=first.device)}  # the weights' precision

    def lr_multiplier(self, step: torch.Tensor, schedule: torch.Tensor | None = None) -> torch.Tensor:
        """modules.optim.warmup_cosine at `step` (a 0-d tensor: 0-based steps taken) of `schedule`
        ((warmup, total) steps: `self.schedule()` by default), on the device."""
        warmup, total = (self.schedule(device=step.device) if schedule is None else schedule).unbind()
        warm = (step + 1) / warmup
        progress = ((step - warmup) / (total - warmup).clamp(min=1)).clamp(0.0, 1.0)
        cosine = self.min_ratio + (1 - self.min_ratio) * 0.5 * (1 + torch.cos(math.pi * progress))
        return torch.where(step < warmup, warm, cosine)

    def __call__(self, state: dict, x: torch.Tensor, y: torch.Tensor, lr: torch.Tensor,
                 masks: torch.Tensor | None = None, teacher_logits: torch.Tensor | None = None,
                 draws: dict[str, torch.Tensor] | None = None, schedule: torch.Tensor | None = None,
                 teacher_weights: tuple[dict, dict] | None = None):
        """One step of every member: x (K, B, C, H, W), y (K, B) or soft (K, B, classes), lr (K,) the
        members' peak learning rates, masks (K, n, B) their drop-path keep masks (n drawing drop
        paths, PackedClassifier._drop_path_masks) or None, teacher_logits (K, B, classes) or None
        (with `teachers`: computed here).
        With `augment`: x uint8, y labels (K, B) and draws: batch_augment.member_draws of the members'
        BatchAugment.draws (crop and flip), with strong stages also batch_augment.strong_inputs and
        "place", the batch's (epoch, batch of the epoch) as a (2,) int64 tensor. schedule: (warmup, total) steps (`self.schedule()`), teacher_weights: the
        teachers' stacked (params, buffers) when they are not `teachers`' own (a group sharing this
        step); both inputs, so that the compiled graph holds no group's constants.
        Returns the next state and the members' losses (K,)."""
        if self.augment is not None:  # labels become soft targets when a member mixes (MixUp/CutMix)
            x, y = self.augment.apply(x, y, draws)
            dtype = next(iter(state["params"].values())).dtype
            x, y = x.to(dtype), (y.to(dtype) if y.is_floating_point() else y)
        buffers = {n: b.clone() for n, b in state["buffers"].items()}  # BatchNorm updates these in place
        fixed = {n: p for n, p in self.packed.members.named_parameters() if n not in self.decay}  # frozen (sin-cos)

        def loss(p, b, xk, yk, tk, mk):  # one member's loss
            weights = {f"clf.model.{n}": t for n, t in {**p, **b}.items()}
            return functional_call(self.member_fn, weights, (xk, yk, tk, mk))[0]

        # autocast without its weight cache: a cache would outlive one step's graph (CUDA graphs)
        amp = dict(device_type=x.device.type, dtype=self.autocast or torch.bfloat16, enabled=self.autocast is not None,
                   cache_enabled=False)
        if self.teachers is not None and teacher_logits is None:  # on the members' augmented images, as a single run
            with torch.autocast(**amp):
                teachers = self.teachers if teacher_weights is None else (self.teachers[0], *teacher_weights)
                teacher_logits = teacher_logits_of(teachers, x)
        dims = (0, 0, 0, 0, None if teacher_logits is None else 0, None if masks is None else 0)

        def total(params, held):  # members share no weights: the gradient of the sum is each member's own
            losses = torch.vmap(loss, in_dims=dims, randomness="error")(params, held, x, y, teacher_logits, masks)
            return losses.sum(), losses.detach()

        # grad of the vmapped sum, not vmap of grad: the same gradients, and vmap(grad) fails on
        # BatchNorm under CPU autocast (torch 2.14: "expected scalar type BFloat16 but found Float")
        with torch.autocast(**amp):
            grads, losses = grad(total, has_aux=True)(state["params"], {**buffers, **fixed})  # BatchNorm writes buffers
        k = losses.shape[0]

        def per_member(t: torch.Tensor, g: torch.Tensor) -> torch.Tensor:  # (K,) -> broadcast over g (K, ...)
            return t.to(g.dtype).view(k, *[1] * (g.ndim - 1))

        if self.clip is not None:  # clip_grad_norm_per_member, without writing into .grad
            total = torch.linalg.vector_norm(torch.stack(
                [torch.linalg.vector_norm(g.reshape(k, -1), dim=1) for g in grads.values()]), dim=0)  # (K,)
            coef = (self.clip / (total + 1e-6)).clamp(max=1.0)
            grads = {n: g * per_member(coef, g) for n, g in grads.items()}
        t = state["step"] + 1                                          # AdamW's step count
        rate = lr * self.lr_multiplier(state["step"], schedule)        # (K,) this step's lr per member
        c1, c2 = 1 - self.beta1 ** t, (1 - self.beta2 ** t).sqrt()     # bias corrections
        new = {"params": {}, "exp_avg": {}, "exp_avg_sq": {}, "buffers": buffers, "step": t}
        for n, g in grads.items():  # torch.optim.AdamW (single tensor), with lr a tensor per member
            r = per_member(rate, g)
            p = state["params"][n] * (1 - r * self.decay[n])
            m = torch.lerp(state["exp_avg"][n], g, 1 - self.beta1)
            v = state["exp_avg_sq"][n] * self.beta2 + (1 - self.beta2) * g * g
            new["params"][n] = p - (r / c1) * m / (v.sqrt() / c2 + self.eps)
            new["exp_avg"][n], new["exp_avg_sq"][n] = m, v
        return new, losses

    def load_into(self, state: dict, packed=None) -> None:
        """Write a state's weights and buffers back into `packed` (default: this step's), to validate
        or export members."""
        packed = packed or self.packed
        with torch.no_grad():
            for n, p in packed.members.named_parameters():
                if n in state["params"]:
                    p.copy_(state["params"][n])
            for n, b in packed.members.named_buffers():
                b.copy_(state["buffers"][n])
