"""The pooled correction's effects (``oltunes.tuner.model.correction``'s module docstring): their group keys and the two
nested trees they form."""

from __future__ import annotations

from typing import TYPE_CHECKING

from oltunes.profiles import accelerator_kind

if TYPE_CHECKING:
    from oltunes.types import Variant

__all__ = ["ACCELERATOR_TREE", "EFFECTS", "PARENTS", "VARIANT_TREE", "groups_of"]

# The effects, and each one's group key (``groups_of``), in one order.
EFFECTS: tuple[str, ...] = ("kind", "acc", "fam", "var", "shape", "acc_fam", "acc_var", "cfg")
# The two nested trees of effects (coarse to fine): the accelerator side, under ``mu``, and the variant side.
ACCELERATOR_TREE: tuple[str, ...] = ("kind", "acc", "acc_fam", "acc_var", "cfg")
VARIANT_TREE: tuple[str, ...] = ("fam", "var", "shape")


def groups_of(acc: str, v: Variant, batch: int, conc: int) -> tuple[str, ...]:
    """The group key of each effect (``EFFECTS`` order) for one configuration."""
    k = accelerator_kind(acc)
    return (k, acc, f"{k}/{v.family}", f"{k}/{v.name}", f"{k}/{v.name}/{batch}/{conc}", f"{acc}/{v.family}",
            f"{acc}/{v.name}", f"{acc}/{v.name}/{batch}/{conc}")


# Parent of each effect's groups in its tree: name -> (the effect whose groups it indexes, the parent effect, or
# None for a tree's root). "fam_kind" sends the family effects up to the kind (their centring, ``correction_fit``).
PARENTS: dict[str, tuple[str, str | None]] = {
    **{tree[0]: (tree[0], None) for tree in (ACCELERATOR_TREE, VARIANT_TREE)},
    **{c: (c, p) for tree in (ACCELERATOR_TREE, VARIANT_TREE) for c, p in zip(tree[1:], tree)},
    "fam_kind": ("fam", "kind"),
}
