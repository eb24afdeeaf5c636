"""The container images on the nodes, by name, as kube-scheduler's cache keeps them.

A Node's ``status.images`` lists each image under every name it is known by (a tag, a
digest), with its size. kube-scheduler 1.34 keeps, per name, the size first reported for it
and the set of nodes that have it, updated node by node as nodes are added, changed and
removed (``addNodeImageStates``/``removeNodeImageStates`` in its cache); image locality
scores a node by the images of the pod it has, each weighed by how many of all nodes have it
too (:mod:`~fairgpu.engine.plugins.image_locality`). Kept the same way here: a kubelet that
pulls an image changes one node's entries, not the whole index (a cluster of thousands of
nodes with dozens of images each sees such changes every few seconds). Names are compared as
written: a node that reports ``docker.io/library/nginx:1.25`` does not have ``nginx:1.25``.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from fairgpu.model.node import NodeImage


class ImageStates:
    """Per image name: its size in bytes (the first node's to report it) and the node slots
    that have it; ``total_nodes`` is how many nodes the cluster has."""

    def __init__(self) -> None:
        self._size: dict[str, int] = {}
        self._slots: dict[str, set[int]] = {}
        self._arrays: dict[str, np.ndarray] = {}  # sorted slots, made when first asked
        self.total_nodes = 0

    def __bool__(self) -> bool:
        """Does any node report an image?"""
        return bool(self._slots)

    def add(self, slot: int, images: Iterable[NodeImage]) -> None:
        """Node ``slot`` has ``images``."""
        for image in images:
            for name in image.names:
                held = self._slots.setdefault(name, set())
                if not held:
                    self._size[name] = image.size_bytes
                held.add(slot)
                self._arrays.pop(name, None)

    def remove(self, slot: int, images: Iterable[NodeImage]) -> None:
        """Node ``slot`` no longer has ``images`` (it changed them, or left); a name no node
        has any more is forgotten, size and all."""
        for image in images:
            for name in image.names:
                held = self._slots.get(name)
                if held is None:
                    continue
                held.discard(slot)
                self._arrays.pop(name, None)
                if not held:
                    del self._slots[name], self._size[name]

    def spread_size(self, name: str) -> tuple[int, np.ndarray] | None:
        """``name``'s size weighed by the share of nodes that have it (kube's
        ``scaledImageScore``: ``int64(float64(size) * (nodes with it / all nodes))``), and
        those nodes' slots; None when no node has it."""
        held = self._slots.get(name)
        if not held or self.total_nodes == 0:
            return None
        slots = self._arrays.get(name)
        if slots is None:
            slots = self._arrays[name] = np.array(sorted(held), dtype=np.intp)
        return int(float(self._size[name]) * (len(held) / self.total_nodes)), slots
