"""The container images on the nodes, by name, as kube-scheduler's cache keeps them.

A Node's ``status.images`` lists each image under every name it is known by (a tag, a
digest), with its size. kube-scheduler 1.34 keeps, per name, the size first reported for it
and the set of nodes that have it (``addNodeImageStates`` in its cache); image locality scores
a node by the images of the pod it has, each weighed by how many of all nodes have it too
(:mod:`~fairgpu.engine.plugins.image_locality`). Names are compared as written: a node that
reports ``docker.io/library/nginx:1.25`` does not have ``nginx:1.25``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from fairgpu.cluster.state import ClusterState


@dataclass(slots=True)
class ImageStates:
    """Per image name: its size in bytes and the node slots that have it; and how many nodes
    the cluster has (``total_nodes``)."""

    by_name: dict[str, tuple[int, np.ndarray]] = field(default_factory=dict)
    total_nodes: int = 0

    @classmethod
    def of(cls, cluster: ClusterState) -> ImageStates:
        """The images of ``cluster``'s active nodes. A name reported with different sizes
        keeps the size of the node in the lowest slot (kube keeps the first node's that its
        cache added: the same where nodes register in slot order)."""
        sizes: dict[str, int] = {}
        slots: dict[str, list[int]] = {}
        total = 0
        for idx, node in enumerate(cluster.nodes[: cluster.size]):
            if node is None or not cluster.active[idx]:
                continue
            total += 1
            for image in node.images:
                for name in image.names:
                    sizes.setdefault(name, image.size_bytes)
                    held = slots.setdefault(name, [])
                    if not held or held[-1] != idx:  # a name listed twice on one node
                        held.append(idx)
        return cls({n: (sizes[n], np.array(s, dtype=np.intp)) for n, s in slots.items()}, total)

    def spread_size(self, name: str) -> tuple[int, np.ndarray] | None:
        """``name``'s size weighed by the share of nodes that have it (kube's
        ``scaledImageScore``: ``int64(float64(size) * (nodes with it / all nodes))``), and
        those nodes' slots; None when no node has it."""
        got = self.by_name.get(name)
        if got is None or self.total_nodes == 0:
            return None
        size, slots = got
        return int(float(size) * (slots.size / self.total_nodes)), slots
