"""Probes of what each family's architecture assumes, on any model the suite trained (issue #9):
attention distance and entropy, [CLS] attention and rollout (attention.py); CKA between layers and models
(representation.py); position-table similarity (pos_embed.py); shift, shuffle and PatchDrop
robustness (robustness.py). Each is a plain function of a timm model and normalised images."""
from .attention import attention_entropy, attention_probs, attention_rollout, cls_attention, mean_attention_distance
from .pos_embed import plot_pos_embed_similarity, pos_embed_2d_structure, pos_embed_similarity
from .representation import cka_heatmap, layer_features, layer_names, linear_cka, minibatch_cka
from .robustness import (accuracy_under_shift, drop_patches, patch_shuffle_accuracy, patchdrop_accuracy,
                         robustness_curves, shift, shift_consistency, shuffle_patches)

__all__ = ["accuracy_under_shift", "attention_entropy", "attention_probs", "attention_rollout", "cka_heatmap", "cls_attention",
           "drop_patches", "layer_features", "layer_names", "linear_cka", "mean_attention_distance",
           "minibatch_cka", "patch_shuffle_accuracy", "patchdrop_accuracy", "plot_pos_embed_similarity",
           "pos_embed_2d_structure", "pos_embed_similarity", "robustness_curves", "shift", "shift_consistency",
           "shuffle_patches"]
