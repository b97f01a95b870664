"""popxl-addons' ``DotTree``: values (tensors, factories, ...) kept by dotted names.

A tree maps each name to a leaf or to a subtree; ``tree.layer1.weight`` and
``tree.to_dict()["layer1.weight"]`` reach the same leaf. Flat views (``to_dict``, ``keys``,
``tensors``) list the leaves sorted by their dotted names, as popxl-addons does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class DotTree:
    """A nested mapping whose leaves are reached by dotted names."""

    def __init__(self, **leaves):
        object.__setattr__(self, "_children", {})
        for name, value in leaves.items():
            self.insert(name, value)

    # --- building ---------------------------------------------------------------------------------
    def insert(self, name: str | int, value: Any, overwrite: bool = False) -> None:
        """Put ``value`` (a leaf, or a tree whose leaves go under ``name``) at the dotted ``name``."""
        if isinstance(name, int) and name < 0:  # popxl-addons' check: negative keys only read (tree[-1])
            raise ValueError(f"Numerical key cannot be negative: {name}")
        head, _, rest = str(name).partition(".")
        if not head:
            raise ValueError(f"DotTree.insert: {name!r} is not a name")
        children = self._children
        if rest:
            child = children.get(head)
            if child is None:
                child = children[head] = type(self)()
            elif not isinstance(child, DotTree):
                raise ValueError(f"DotTree.insert: {head!r} is a leaf; {name!r} cannot go under it")
            child.insert(rest, value, overwrite)
            return
        if head in children and not overwrite:
            raise ValueError(f"DotTree.insert: {name!r} is already in the tree; pass overwrite=True to replace it")
        children[head] = value

    def update(self, other: "DotTree | Mapping[str, Any]", overwrite: bool = False) -> None:
        """Add every leaf of ``other``; its names must not be in this tree yet (unless ``overwrite``)."""
        items = other.to_dict() if isinstance(other, DotTree) else dict(other)
        for name, value in items.items():
            self.insert(name, value, overwrite)

    @classmethod
    def from_dict(cls, leaves: Mapping[str, Any]) -> "DotTree":
        tree = cls()
        for name, value in leaves.items():
            tree.insert(name, value)
        return tree

    @classmethod
    def pack(cls, keys: Iterable[str], values: Iterable[Any]) -> "DotTree":
        keys, values = list(keys), list(values)
        if len(keys) != len(values):
            raise ValueError(f"DotTree.pack: {len(keys)} keys for {len(values)} values")
        return cls.from_dict(dict(zip(keys, values)))

    def copy(self) -> "DotTree":
        return type(self).from_dict(self.to_dict())

    # --- reading ----------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        """The leaves by their dotted names, sorted."""
        flat = {}
        for name, child in self._children.items():
            if isinstance(child, DotTree):
                flat.update({f"{name}.{k}": v for k, v in child.to_dict().items()})
            else:
                flat[name] = child
        return dict(sorted(flat.items()))

    def unpack(self) -> tuple[tuple[str, ...], tuple[Any, ...]]:
        flat = self.to_dict()
        return tuple(flat), tuple(flat.values())

    def keys(self) -> list[str]:
        """The names of the top level (leaves and subtrees), sorted."""
        return sorted(self._children)

    def values(self) -> list[Any]:
        """The top level's leaves and subtrees, in the order of :meth:`keys`."""
        return [self._children[k] for k in self.keys()]

    def keys_flat(self) -> list[str]:
        """Every leaf's dotted name, sorted."""
        return list(self.to_dict())

    def values_flat(self) -> list[Any]:
        """Every leaf, in the order of :meth:`keys_flat`."""
        return list(self.to_dict().values())

    def len(self) -> int:
        return len(self._children)

    def len_flat(self) -> int:
        return len(self.to_dict())

    def pop(self, name: str) -> Any:
        value = self[name]
        parent, _, last = str(name).rpartition(".")
        del (self[parent] if parent else self)._children[last]
        return value

    def filter_keys(self, names: Iterable[str]) -> "DotTree":
        """A tree of the given names (leaves or subtrees) only."""
        tree = type(self)()
        for name in names:
            tree.insert(name, self[name])
        return tree

    def to_mapping(self, values: "DotTree") -> dict:
        """This tree's leaves to ``values``' leaves of the same names (both must have the same names)."""
        mine, theirs = self.to_dict(), values.to_dict()
        if set(mine) != set(theirs):
            raise KeyError(f"to_mapping: the trees' names differ: {sorted(set(mine) ^ set(theirs))}")
        return {mine[k]: theirs[k] for k in mine}

    def map(self, fn) -> "DotTree":
        """A tree of the same names with ``fn`` of each leaf."""
        return type(self).from_dict({k: fn(v) for k, v in self.to_dict().items()})

    def get(self, name: str, default: Any = None) -> Any:
        try:
            return self[name]
        except KeyError:
            return default

    def __getitem__(self, name: str | int) -> Any:
        if isinstance(name, int) and name < 0:  # counted back from the largest numerical key, as popxl-addons
            numeric = [int(k) for k in self._children if k.isnumeric()]
            if not numeric or max(numeric) + 1 + name < 0 or str(max(numeric) + 1 + name) not in self._children:
                raise KeyError(f"Negative numerical key does not exist: {name} (numerical keys: {sorted(numeric)})")
            name = max(numeric) + 1 + name
        node: Any = self
        for part in str(name).split("."):
            if not isinstance(node, DotTree) or part not in node._children:
                raise KeyError(name)
            node = node._children[part]
        return node

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._children[name]
        except KeyError:
            raise AttributeError(f"{type(self).__name__} has no key {name!r} (keys: {', '.join(self.keys_flat())})") \
                from None

    def __setattr__(self, name: str, value: Any) -> None:
        self.insert(name, value, overwrite=True)

    def __contains__(self, name: str) -> bool:
        return self.get(name) is not None

    def __len__(self) -> int:
        return self.len_flat()

    def __repr__(self) -> str:
        lines = [f"{name}: {value!r}" for name, value in self.to_dict().items()]  # one leaf a name
        return f"{type(self).__name__}(" + (", ".join(lines)) + ")"
