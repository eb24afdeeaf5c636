"""The openb trace (Alibaba GPU cluster, 2023): node and pod CSV lists as engine objects.

Node list columns: ``sn, cpu_milli, memory_mib, gpu, model``. Pod list columns: ``name,
cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time`` (times in seconds).

Mapping to the engine:

* A node becomes a :class:`NodeInfo` with ``cpu`` (milli), ``memory`` (bytes) and ``gpu``
  devices of product ``model`` (labels ``nvidia.com/gpu.product``/``.count``/``.memory``, no
  taints). The trace has no per-device memory: each device gets the nominal memory of its model
  (:data:`GPU_MODEL_MEMORY_MIB`, 32 GiB for unknown models). openb pods never ask for GPU
  memory, so device memory never constrains a placement; it only shows up in reports. The
  trace has no pod-count limit either: ``pods`` allocatable is :data:`NODE_MAX_PODS`, large
  enough never to bind.
* A pod becomes a :class:`PodInfo` asking ``cpu`` and ``memory`` plus
  ``GpuRequest(count=num_gpu, milli=gpu_milli or 1000, models=gpu_spec)``: ``gpu_milli`` is
  capped at 1000; ``num_gpu == 1`` with ``gpu_milli < 1000`` shares one device; ``gpu_spec``
  (``V100M16|V100M32``) lists the allowed GPU models. ``qos`` is kept verbatim in the label
  ``fairgpu.io/qos-class`` and mapped to a Kubernetes QoS class (LS and Guaranteed ->
  Guaranteed, Burstable -> Burstable, BE -> BestEffort).
* :class:`OpenbPod` carries ``arrival`` = ``creation_time`` and ``duration`` =
  ``deletion_time - creation_time`` for the general simulator (the FGD protocol ignores them).

Bad rows raise :class:`OpenbFormatError` naming the file, line and column.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from fairgpu.model.gpu import DEFAULT_NAMES, WHOLE, GpuRequest
from fairgpu.model.node import NodeInfo
from fairgpu.model.pod import (
    CPU,
    MEMORY,
    PODS,
    QOS_BEST_EFFORT,
    QOS_BURSTABLE,
    QOS_GUARANTEED,
    PodInfo,
)

if TYPE_CHECKING:
    from fairgpu.sim.workload import Workload

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)
LABEL_QOS_CLASS = "fairgpu.io/qos-class"
NAMESPACE = "openb"
NODE_MAX_PODS = 10_000
MIB = 1 << 20
DEFAULT_GPU_MEMORY_MIB = 32768
# Nominal device memory of the models in the trace (MiB); used for reports only.
GPU_MODEL_MEMORY_MIB = {
    "P100": 16384,
    "T4": 15360,
    "V100M16": 16384,
    "V100M32": 32768,
    "A10": 24576,
    "A100": 40960,
    "G2": 32768,
    "G3": 32768,
}
QOS_CLASSES = {
    "LS": QOS_GUARANTEED,
    "Guaranteed": QOS_GUARANTEED,
    "Burstable": QOS_BURSTABLE,
    "BE": QOS_BEST_EFFORT,
}


class OpenbFormatError(ValueError):
    """A malformed openb CSV: names the file, the line and the column."""

    def __init__(self, path: str | Path, line: int, column: str, problem: str) -> None:
        super().__init__(f"{path}:{line}: column {column!r}: {problem}")
        self.path = str(path)
        self.line = line
        self.column = column
        self.problem = problem


@dataclass(slots=True)
class OpenbPod:
    """One pod of an openb pod list: the engine's view plus the raw trace fields.

    ``num_gpu`` and ``gpu_milli`` (capped at 1000, 1000 for whole GPUs) are the trace's ask;
    ``arrival``/``duration`` are in seconds (``duration`` None when the pod never ended).
    """

    pod: PodInfo
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: str
    qos: str
    arrival: float
    duration: float | None

    @property
    def gpu_request_milli(self) -> int:
        """GPU compute the pod asks in total (``num_gpu * gpu_milli``)."""
        return self.num_gpu * self.gpu_milli if self.num_gpu else 0


def _rows(
    path: str | Path, columns: tuple[str, ...], required: int | None = None
) -> Iterable[tuple[int, list[str]]]:
    """(line number, row) for each data row, fields in ``columns`` order.

    The header must name the first ``required`` columns (all by default); the others may be
    absent from the file and read as ''.
    """
    required = len(columns) if required is None else required
    with open(path, newline="", encoding="utf-8") as handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise OpenbFormatError(path, 1, "", "empty file, expected a header row")
        header = [h.strip() for h in header]
        missing = [c for c in columns[:required] if c not in header]
        if missing:
            raise OpenbFormatError(path, 1, missing[0], "missing from the header row")
        index = [header.index(c) if c in header else -1 for c in columns]
        width = max(index) + 1
        for row in reader:
            line = reader.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue
            if len(row) < width:
                col = columns[next(i for i, j in enumerate(index) if j >= len(row))]
                raise OpenbFormatError(path, line, col, f"row has only {len(row)} fields")
            yield line, [row[j].strip() if j >= 0 else "" for j in index]


def _int(path: str | Path, line: int, column: str, text: str, default: int | None = None) -> int:
    if text == "" and default is not None:
        return default
    try:
        value = int(text, 10)
    except ValueError:
        try:
            real = float(text)
        except ValueError:
            raise OpenbFormatError(path, line, column, f"{text!r} is not a number") from None
        if real != int(real):
            raise OpenbFormatError(path, line, column, f"{text!r} is not a whole number") from None
        value = int(real)
    if value < 0:
        raise OpenbFormatError(path, line, column, f"{value} is negative")
    return value


def load_openb_nodes(path: str | Path) -> list[NodeInfo]:
    """Read an openb node list (``openb_node_list_*.csv``) into :class:`NodeInfo` objects."""
    names = DEFAULT_NAMES
    nodes: list[NodeInfo] = []
    seen: set[str] = set()
    for line, (sn, cpu, mem, gpu, model) in _rows(path, NODE_COLUMNS):
        if not sn:
            raise OpenbFormatError(path, line, "sn", "node name is empty")
        if sn in seen:
            raise OpenbFormatError(path, line, "sn", f"duplicate node {sn!r}")
        seen.add(sn)
        cpu_milli = _int(path, line, "cpu_milli", cpu)
        memory_mib = _int(path, line, "memory_mib", mem)
        count = _int(path, line, "gpu", gpu, default=0)
        if count > 0 and not model:
            raise OpenbFormatError(
                path, line, "model", f"node {sn!r} has {count} GPUs but no model"
            )
        device_mib = GPU_MODEL_MEMORY_MIB.get(model, DEFAULT_GPU_MEMORY_MIB)
        labels = {"kubernetes.io/hostname": sn}
        if count > 0:
            labels[names.product_label] = model
            labels[names.count_label] = str(count)
            labels[names.memory_label] = str(device_mib)
        nodes.append(
            NodeInfo(
                name=sn,
                labels=labels,
                allocatable={CPU: cpu_milli, MEMORY: memory_mib * MIB, PODS: NODE_MAX_PODS},
                gpu_count=count,
                gpu_memory_mib=device_mib,
                gpu_model=model if count > 0 else "",
                uid=sn,
            )
        )
    return nodes


def _float(path: str | Path, line: int, column: str, text: str) -> float | None:
    if text == "":
        return None
    try:
        return float(text)
    except ValueError:
        raise OpenbFormatError(path, line, column, f"{text!r} is not a number") from None


def openb_pod_info(
    name: str,
    cpu_milli: int,
    memory_mib: int,
    num_gpu: int,
    gpu_milli: int,
    gpu_spec: str = "",
    qos: str = "",
    uid: str | None = None,
) -> PodInfo:
    """The :class:`PodInfo` for one openb pod (``gpu_milli`` already capped at 1000)."""
    models = frozenset(m for m in gpu_spec.split("|") if m) or None
    if num_gpu > 0:
        gpu = GpuRequest(count=num_gpu, milli=gpu_milli or WHOLE, models=models)
    else:
        gpu = GpuRequest(models=models) if models else GpuRequest()
    labels = {LABEL_QOS_CLASS: qos} if qos else {}
    return PodInfo(
        name=name,
        namespace=NAMESPACE,
        uid=uid or f"{NAMESPACE}/{name}",
        labels=labels,
        requests={CPU: cpu_milli, MEMORY: memory_mib * MIB, PODS: 1},
        gpu=gpu,
        qos=QOS_CLASSES.get(qos, QOS_BURSTABLE),
        scheduler_name="fairgpu",
    )


def load_openb_pods(path: str | Path) -> list[OpenbPod]:
    """Read an openb pod list (``openb_pod_list_*.csv``) in file order.

    Only ``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` are required (the multigpu lists
    have no other column); missing times give arrival 0 and no duration.

    Raises :class:`OpenbFormatError` for a bad row (file, line, column): non-numeric or negative
    amounts, a fraction with ``num_gpu > 1``, an unknown ``qos``, a deletion before creation.
    """
    out: list[OpenbPod] = []
    seen: set[str] = set()
    # Some lists (multigpu*) carry only the first five columns.
    for line, row in _rows(path, POD_COLUMNS, required=5):
        name, cpu, mem, ngpu, milli, spec, qos, _phase, created, deleted, _sched = row
        if not name:
            raise OpenbFormatError(path, line, "name", "pod name is empty")
        if name in seen:
            raise OpenbFormatError(path, line, "name", f"duplicate pod {name!r}")
        seen.add(name)
        cpu_milli = _int(path, line, "cpu_milli", cpu)
        memory_mib = _int(path, line, "memory_mib", mem)
        num_gpu = _int(path, line, "num_gpu", ngpu, default=0)
        gpu_milli = min(_int(path, line, "gpu_milli", milli, default=0), WHOLE)
        if num_gpu > 0 and gpu_milli == 0:
            gpu_milli = WHOLE
        if num_gpu > 1 and gpu_milli < WHOLE:
            raise OpenbFormatError(
                path, line, "gpu_milli", f"{gpu_milli} is a fraction but num_gpu is {num_gpu}"
            )
        if num_gpu == 0:
            gpu_milli = 0
        if qos and qos not in QOS_CLASSES:
            raise OpenbFormatError(
                path, line, "qos", f"unknown {qos!r} (expected {', '.join(QOS_CLASSES)})"
            )
        arrival = _float(path, line, "creation_time", created) or 0.0
        end = _float(path, line, "deletion_time", deleted)
        if end is not None and end < arrival:
            raise OpenbFormatError(path, line, "deletion_time", "is before creation_time")
        pod = openb_pod_info(name, cpu_milli, memory_mib, num_gpu, gpu_milli, spec, qos)
        pod.created = arrival
        out.append(
            OpenbPod(
                pod=pod,
                cpu_milli=cpu_milli,
                memory_mib=memory_mib,
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=spec,
                qos=qos,
                arrival=arrival,
                duration=None if end is None else end - arrival,
            )
        )
    return out


def openb_workload(pod_csv: str | Path, node_csv: str | Path) -> Workload:
    """A :class:`~fairgpu.sim.workload.Workload` replaying the trace in creation-time order.

    Arrival = ``creation_time``, run time = ``deletion_time - creation_time``.
    """
    from fairgpu.sim.workload import PodArrival, Workload

    pods = sorted(load_openb_pods(pod_csv), key=lambda p: (p.arrival, p.pod.name))
    return Workload(
        name=Path(pod_csv).stem,
        nodes=load_openb_nodes(node_csv),
        arrivals=[PodArrival(p.pod, p.arrival, p.duration) for p in pods],
        description=f"openb trace {Path(pod_csv).name} on {Path(node_csv).name}",
    )


__all__ = [
    "LABEL_QOS_CLASS",
    "OpenbFormatError",
    "OpenbPod",
    "load_openb_nodes",
    "load_openb_pods",
    "openb_pod_info",
    "openb_workload",
]
