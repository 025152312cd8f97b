"""PackedStep, a packed group's training step as one pure function (modules/packed_step.py):
for every family it takes the same steps as PackedClassifier under Lightning's optimisation
(which tests/test_packed.py holds equal to single runs), and torch.compile(fullgraph=True) turns
it into one graph that computes the same thing: no host synchronisation, no graph break (inductor
for vit and resnet, aot_eager for the other families: see BACKEND). The step
augments and normalises uint8 batches itself (crop and flip; RandAugment, Random Erasing and
MixUp/CutMix for a member of the strong variant, packed beside one of the default): the crop and
flip from numbers drawn outside it from each member's loader generator, the strong stages from
numbers it draws inside from the members' seeds and the batch's place (counter-based); they equal
the batches each member's single run makes.

Float64, so that equality is tight: Adam's first steps divide by sqrt(v), which turns fp32
rounding of near-zero gradients into visible weight differences. One block per stage keeps
compiling fast (each family's tiny row with its depths cut to 1; Swin keeps the 2 blocks of its
first stage, so that a shifted window runs)."""
from __future__ import annotations

import pytest
import torch

import modules.budgets as budgets
from datamodules.batch_augment import AugmentConfig, BatchAugment, member_draws, strong_inputs
from modules import FAMILIES
from modules.packed import PackedClassifier, clip_grad_norm_per_member
from modules.packed_step import PackedStep

SHALLOW = {"vit": dict(depth=1), "deit": dict(depth=1), "hybrid": dict(depth=1, stem_depths=(1, 1, 1)),
           "swin": dict(depths=(2, 1, 1)), "convnext": dict(depths=(1, 1, 1)), "resnet": dict(depths=(1, 1, 1))}
K, B, STEPS, TOTAL = 2, 4, 3, 10     # 10 planned steps: warmup ends at step 1, the cosine then runs
LRS = [2 ** -10, 2 ** -8]            # one peak lr per member; exact in float32, as PackedClassifier holds them


@pytest.fixture(autouse=True)
def shallow(monkeypatch):
    for family, row in SHALLOW.items():
        monkeypatch.setitem(budgets.ARCHS, (family, "tiny"), {**budgets.ARCHS[family, "tiny"], **row})


def _config(family: str) -> dict:
    # Swin with stochastic depth: the masks come in, drawn as PackedClassifier draws them
    return dict(family=family, budget="tiny", drop_path_rate=0.1 if family == "swin" else 0.0,
                distillation="hard")


AUGMENT = BatchAugment(AugmentConfig(crop_padding=2, hflip=True), torch.tensor([72.9]), torch.tensor([90.0]), 10)
STRONG = BatchAugment(AugmentConfig(crop_padding=2, hflip=True, randaugment=True, random_erasing=0.5,
                                    mixup_alpha=0.8, cutmix_alpha=1.0), torch.tensor([72.9]), torch.tensor([90.0]), 10)


SEEDS = [10 + k for k in range(K)]   # the members' data seeds: their loader generators and strong draws


def _batches(family: str):
    """uint8 images (K, B, 1, 28, 28), labels, DeiT's teacher logits, each member's loader generator
    and the batch's place (epoch, batch)."""
    g = torch.Generator().manual_seed(1)
    loaders = [torch.Generator().manual_seed(s) for s in SEEDS]
    for i in range(STEPS):
        x = torch.randint(0, 256, (K, B, 1, 28, 28), generator=g, dtype=torch.uint8)
        y = torch.randint(0, 10, (K, B), generator=g)
        teacher = torch.randn(K, B, 10, generator=g, dtype=torch.float64) if family == "deit" else None
        yield x, y, teacher, loaders, (0, i)


def _group_draws(augments, loaders, place) -> dict:
    """A group's draws as its loop hands them over: each member's crop and flip from its generator,
    the members' strong inputs and the batch's place."""
    strong = strong_inputs([a.cfg for a in augments], SEEDS, (28, 28), "cpu")
    return (member_draws([a.draws(B, g) for a, g in zip(augments, loaders)])
            | strong | ({"place": torch.tensor(place)} if strong else {}))


def _lightning_steps(family: str, augments=(AUGMENT,) * K):
    """PackedClassifier's step as Lightning takes it: forward, backward of the summed losses,
    per-member clipping at 1, AdamW at lr 1 with the lerp to each member's lr, then the schedule.
    Member k's batches are augmented by augments[k]."""
    from experiments.runs.packed.loop import _targets
    ref = PackedClassifier(seeds=[0, 1], lrs=LRS, **_config(family)).double().train()
    opt = ref.configure_optimizers(total_steps=TOTAL)
    optimizer, schedule = opt["optimizer"], opt["lr_scheduler"]["scheduler"]
    losses, masks = [], []
    for i, (images, y, teacher, loaders, place) in enumerate(_batches(family)):
        # each member's batch as its single run's loader makes it: BatchAugment.train with its generator
        xs, ys = zip(*(augments[k].train(images[k], y[k], loaders[k],
                                         strong_inputs([augments[k].cfg], [SEEDS[k]], (28, 28), "cpu"), place)
                       for k in range(K)))
        x, y = torch.stack(xs).double(), _targets(list(ys))
        y = y.double() if y.is_floating_point() else y     # soft targets when a member mixes
        m = ref._drop_path_masks(x)
        masks.append(m)
        ref._drop_path_masks = lambda x, m=m: m
        ref._teacher_logits = lambda x, t=teacher: t
        loss, _ = ref(x, y)
        optimizer.zero_grad()
        loss.sum().backward()
        clip_grad_norm_per_member(list(ref.members.parameters()), 1.0)
        ref.optimizer_step(0, i, optimizer, None)
        schedule.step()
        losses.append(loss.detach())
    return ref, torch.stack(losses), masks


# fullgraph=True is the proof (dynamo's trace, whatever the backend); inductor's generated kernels are
# also checked for the two families the cpu profiles train, aot_eager (the traced graph, eager kernels)
# for the others: inductor's C++ compile takes 1-3 minutes per family on 2 cores
BACKEND = {"vit": "inductor", "resnet": "inductor"}


def _pure_steps(family: str, masks, compiled: bool, augments=(AUGMENT,) * K, backend: str | None = None):
    packed = PackedClassifier(seeds=[0, 1], lrs=LRS, **_config(family)).double()
    step = PackedStep(packed, total_steps=TOTAL, clip=1.0, augment=augments[0])
    run = torch.compile(step, fullgraph=True, backend=backend or BACKEND.get(family, "aot_eager")) if compiled else step
    state, lr, losses = step.init_state(), torch.tensor(LRS, dtype=torch.float64), []
    for (images, y, teacher, loaders, place), m in zip(_batches(family), masks):
        # the same random numbers: the crop and flip drawn outside the step, the strong stages inside
        state, loss = run(state, images, y, lr, m, teacher, _group_draws(augments, loaders, place))
        losses.append(loss)
    return state, torch.stack(losses)


def _max_diff(a: dict, b: dict) -> float:
    assert a.keys() == b.keys()
    return max(((a[n].double() - b[n].double()).abs().max().item() for n in a), default=0.0)


@pytest.mark.parametrize("family", FAMILIES)
def test_pure_step_equals_lightning_step_and_compiles_to_one_graph(family):
    ref, ref_losses, masks = _lightning_steps(family)
    if family == "swin":
        assert masks[0] is not None and masks[0].shape[0] == K and masks[0].shape[2] == B
    state, losses = _pure_steps(family, masks, compiled=False)
    torch.testing.assert_close(losses, ref_losses, rtol=0, atol=1e-10)
    weights = {n: p for n, p in ref.members.named_parameters() if n in state["params"]}
    assert _max_diff(state["params"], weights) < 1e-9
    assert _max_diff(state["buffers"], dict(ref.members.named_buffers())) < 1e-9  # BatchNorm statistics
    assert state["step"].item() == STEPS
    if family in ("resnet", "hybrid", "convnext"):   # the running statistics moved, per member
        stats = [b for n, b in state["buffers"].items() if n.endswith("running_mean")]
        assert (family == "convnext") == (not stats)  # ConvNeXt has LayerNorm only
        assert all(not torch.equal(s[0], s[1]) for s in stats)

    torch._dynamo.reset()
    compiled, compiled_losses = _pure_steps(family, masks, compiled=True)  # fullgraph: a break raises
    torch.testing.assert_close(compiled_losses, losses, rtol=0, atol=1e-10)
    assert _max_diff(compiled["params"], state["params"]) < 1e-9
    assert _max_diff(compiled["buffers"], state["buffers"]) < 1e-9
    assert _max_diff(compiled["exp_avg_sq"], state["exp_avg_sq"]) < 1e-12
    torch._dynamo.reset()


def test_lr_multiplier_is_warmup_cosine_on_the_device():
    from modules.optim import warmup_cosine
    packed = PackedClassifier(seeds=[0], family="resnet", budget="tiny", warmup_fraction=0.1)
    step = PackedStep(packed, total_steps=50)
    got = [step.lr_multiplier(torch.tensor(float(s))).item() for s in range(60)]
    want = [warmup_cosine(s, 50, 5, 0.01) for s in range(60)]
    assert max(abs(a - b) for a, b in zip(got, want)) < 1e-6


@pytest.mark.parametrize("family", ["resnet", "vit"])
def test_strong_variant_member_beside_a_default_one(family):
    """A member of the strong variant (RandAugment, Random Erasing, MixUp/CutMix: soft targets) packed
    beside one of the default variant: the step augments both from their own draws, as their single
    runs' loaders do, and takes the same steps as Lightning's; compiled, one graph, the same steps."""
    augments = (AUGMENT, STRONG)
    ref, ref_losses, masks = _lightning_steps(family, augments)
    state, losses = _pure_steps(family, masks, compiled=False, augments=augments)
    torch.testing.assert_close(losses, ref_losses, rtol=0, atol=1e-10)
    weights = {n: p for n, p in ref.members.named_parameters() if n in state["params"]}
    assert _max_diff(state["params"], weights) < 1e-9
    torch._dynamo.reset()
    compiled, compiled_losses = _pure_steps(family, masks, compiled=True, augments=augments, backend="aot_eager")
    torch.testing.assert_close(compiled_losses, losses, rtol=0, atol=1e-10)
    assert _max_diff(compiled["params"], state["params"]) < 1e-9
    torch._dynamo.reset()


def test_bf16_autocast_step_tracks_the_float32_step():
    """autocast=torch.bfloat16 (the suite's bf16-mixed): weights and optimizer state stay float32,
    the forward and backward run in bfloat16; its losses follow the float32 step's within bf16 rounding."""
    losses = {}
    for dtype in (None, torch.bfloat16):
        packed = PackedClassifier(seeds=[0, 1], family="vit", budget="tiny")
        step = PackedStep(packed, total_steps=TOTAL, autocast=dtype)
        state = step.init_state()
        g = torch.Generator().manual_seed(0)
        x, y = torch.randn(K, 8, 1, 28, 28, generator=g), torch.randint(0, 10, (K, 8), generator=g)
        out = []
        for _ in range(STEPS):
            state, loss = step(state, x, y, torch.tensor(LRS))
            out.append(loss)
        assert all(p.dtype == torch.float32 for p in state["params"].values())
        losses[dtype] = torch.stack(out)
    assert not torch.equal(losses[None], losses[torch.bfloat16])        # bf16 did run
    torch.testing.assert_close(losses[torch.bfloat16], losses[None], rtol=0.02, atol=0.02)


def test_teachers_inside_the_step_see_the_augmented_images():
    """With `teachers` (PackedClassifier.teacher_stack), DeiT's teachers run inside the step on each
    member's cropped and flipped images: the same step as with their logits computed outside on those
    images and passed in; and it compiles to one graph."""
    from torch.func import stack_module_state
    from modules import ImageClassifier
    from modules.packed import teacher_logits
    nets = []
    for seed in range(K):  # each member's own frozen ResNet teacher
        torch.manual_seed(100 + seed)
        nets.append(ImageClassifier(family="resnet", budget="tiny").model.double().eval())
    tp, tb = stack_module_state(nets)
    stack = (nets[0].to("meta"), tp, tb)
    runs = {}
    for inside in (False, True, "compiled"):
        packed = PackedClassifier(seeds=[0, 1], lrs=LRS, **_config("deit")).double()
        step = PackedStep(packed, total_steps=TOTAL, clip=1.0, augment=AUGMENT, teachers=stack if inside else None)
        run = torch.compile(step, fullgraph=True, backend="aot_eager") if inside == "compiled" else step
        state, lr, losses = step.init_state(), torch.tensor(LRS, dtype=torch.float64), []
        for images, y, _, loaders, place in _batches("deit"):
            draws = _group_draws((AUGMENT,) * K, loaders, place)
            given = None
            if not inside:   # the same augmentation, done here, and the teachers' logits on it
                x = AUGMENT.apply(images, y, draws)[0].double()
                given = teacher_logits(stack, x)
            state, loss = run(state, images, y, lr, None, given, draws)
            losses.append(loss)
        runs[inside] = torch.stack(losses)
        torch._dynamo.reset()
    torch.testing.assert_close(runs[True], runs[False], rtol=0, atol=1e-10)
    torch.testing.assert_close(runs["compiled"], runs[True], rtol=0, atol=1e-10)
