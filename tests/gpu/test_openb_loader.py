"""The openb CSV loader: mapping to engine objects and clear errors for bad rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from fairgpu.model.pod import QOS_BEST_EFFORT, QOS_GUARANTEED
from fairgpu.sim.workloads.openb import (
    LABEL_QOS_CLASS,
    OpenbFormatError,
    load_openb_nodes,
    load_openb_pods,
    openb_workload,
)

POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time\n"
)


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_nodes_map_to_gpu_devices(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "nodes.csv",
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,V100M32\nn1,32000,1024,0,\n",
    )
    n0, n1 = load_openb_nodes(path)
    assert (n0.name, n0.gpu_count, n0.gpu_model, n0.gpu_memory_mib) == ("n0", 2, "V100M32", 32768)
    assert n0.allocatable["cpu"] == 64000 and n0.allocatable["memory"] == 262144 << 20
    assert n0.labels["nvidia.com/gpu.product"] == "V100M32"
    assert n1.gpu_count == 0 and "nvidia.com/gpu.product" not in n1.labels


def test_pods_map_to_requests_models_qos_and_times(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "pods.csv",
        POD_HEADER
        + "p0,4000,1024,1,460,V100M16|V100M32,LS,Running,10,110,10\n"
        + "p1,8000,2048,2,1000,,BE,Running,20,,20\n"
        + "p2,1000,512,0,0,,Burstable,Running,30,35,30\n"
        + "p3,1000,512,1,1500,,Guaranteed,Running,40,50,40\n",
    )
    p0, p1, p2, p3 = load_openb_pods(path)
    assert p0.pod.gpu.count == 1 and p0.pod.gpu.milli == 460 and p0.pod.gpu.is_shared
    assert p0.pod.gpu.models == frozenset({"V100M16", "V100M32"})
    assert p0.pod.qos == QOS_GUARANTEED and p0.pod.labels[LABEL_QOS_CLASS] == "LS"
    assert (p0.arrival, p0.duration) == (10.0, 100.0)
    assert p1.pod.gpu.count == 2 and not p1.pod.gpu.is_shared and p1.duration is None
    assert p1.pod.qos == QOS_BEST_EFFORT and p1.gpu_request_milli == 2000
    assert p2.pod.gpu.count == 0 and p2.gpu_request_milli == 0
    assert p3.gpu_milli == 1000 and not p3.pod.gpu.is_shared  # capped at one GPU
    assert p0.pod.requests["memory"] == 1024 << 20 and p0.pod.requests["cpu"] == 4000


def test_five_column_lists_load(tmp_path: Path) -> None:
    path = _write(
        tmp_path, "m.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1000,10,8,1000\n"
    )
    (pod,) = load_openb_pods(path)
    assert pod.num_gpu == 8 and pod.arrival == 0.0 and pod.duration is None


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("p,abc,1,1,100,,LS,Running,0,1,0", "cpu_milli"),
        ("p,1000,-5,1,100,,LS,Running,0,1,0", "memory_mib"),
        ("p,1000,5,2,300,,LS,Running,0,1,0", "gpu_milli"),
        ("p,1000,5,1,300,,Premium,Running,0,1,0", "qos"),
        ("p,1000,5,1,300,,LS,Running,10,5,0", "deletion_time"),
        ("p,1000,5", "num_gpu"),
    ],
)
def test_bad_pod_rows_name_file_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    path = _write(tmp_path, "bad.csv", POD_HEADER + "ok,1,1,0,0,,LS,Running,0,1,0\n" + row + "\n")
    with pytest.raises(OpenbFormatError) as info:
        load_openb_pods(path)
    assert info.value.line == 3 and info.value.column == column
    assert str(path) in str(info.value) and column in str(info.value)


def test_bad_node_rows_and_headers(tmp_path: Path) -> None:
    path = _write(tmp_path, "n.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1,2,\n")
    with pytest.raises(OpenbFormatError, match="column 'model'"):
        load_openb_nodes(path)
    header = _write(tmp_path, "h.csv", "sn,cpu_milli,gpu,model\n")
    with pytest.raises(OpenbFormatError, match="memory_mib"):
        load_openb_nodes(header)


def test_workload_orders_by_creation_time(tmp_path: Path) -> None:
    pods = _write(
        tmp_path,
        "pods.csv",
        POD_HEADER + "late,1,1,0,0,,LS,Running,50,60,50\nearly,1,1,0,0,,LS,Running,5,6,5\n",
    )
    nodes = _write(tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1,1,T4\n")
    workload = openb_workload(pods, nodes)
    assert [a.pod.name for a in workload.arrivals] == ["early", "late"]  # type: ignore[attr-defined]
    assert workload.arrivals[0].duration == 1.0  # type: ignore[attr-defined]
