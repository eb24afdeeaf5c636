"""CSI migration as NodeVolumeLimits sees it: which in-tree volumes count as a CSI driver's.

kube-scheduler 1.34 counts, besides CSI persistent volumes, the volumes of in-tree plugins
migrated to CSI under their CSI driver's name, with the volume handle the CSI translation
library gives them, wherever the node has a CSINode object (the only nodes with limits):

* migration is on for ``kubernetes.io/gce-pd``, ``kubernetes.io/aws-ebs``,
  ``kubernetes.io/azure-disk`` and ``kubernetes.io/cinder`` on every such node; for
  ``kubernetes.io/portworx-volume`` only where the CSINode's annotation
  ``storage.alpha.kubernetes.io/migrated-plugins`` lists it; never for
  ``kubernetes.io/azure-file`` or ``kubernetes.io/vsphere-volume`` (their volumes, and claims of
  classes they provision, are not counted at all);
* inline ``gcePersistentDisk`` volumes get the handle
  ``projects/UNSPECIFIED/zones/UNSPECIFIED/disks/<pdName>``, inline and persistent
  ``awsElasticBlockStore`` volumes their bare ``vol-...`` ID, persistent GCE disks a handle
  naming the zone (or region) of their zone label;
* inline and persistent ``azureDisk`` volumes their disk URI -- only disks of kind
  ``Managed``: the translation refuses the others (the API's default kind is ``Shared``), so
  they are not counted --, ``cinder`` and ``portworxVolume`` volumes their volume ID.

CSI ephemeral inline volumes (``volumes[].csi``) are never counted. An inline volume the
translation refuses (an EBS ID that is malformed, an Azure disk not Managed) fails the whole
attempt on a node with a CSINode, as kube-scheduler's does (see ``node_volume_limits``).

VolumeBinding translates too: on a node whose CSINode annotation lists the plugin, a bound
in-tree persistent volume's node affinity is checked as translated for its CSI driver, its
zone key renamed to the driver's topology key (``topology.gke.io/zone``,
``topology.ebs.csi.aws.com/zone``, ``topology.cinder.csi.openstack.org/zone``), or, without a
zone in the affinity, the zones of its zone label added as that key (see
:func:`translated_affinity`). Azure disk and Portworx volumes keep their affinity as it is
(their translation does not touch topology); an Azure disk not Managed fails there.
"""

from __future__ import annotations

from collections.abc import Mapping

from fairgpu.model.selectors import NodeSelectorTerm, Requirement
from fairgpu.model.volumes import (
    AWS_EBS,
    AZURE_DISK,
    CINDER,
    GCE_PD,
    PORTWORX,
    CSINodeInfo,
    VolumeInfo,
    ebs_volume_id,
)

DRIVERS = {
    GCE_PD: "pd.csi.storage.gke.io",
    AWS_EBS: "ebs.csi.aws.com",
    AZURE_DISK: "disk.csi.azure.com",
    CINDER: "cinder.csi.openstack.org",
    PORTWORX: "pxd.portworx.com",
    "kubernetes.io/azure-file": "file.csi.azure.com",
    "kubernetes.io/vsphere-volume": "csi.vsphere.vmware.com",
}
ALWAYS_ON = frozenset({GCE_PD, AWS_EBS, AZURE_DISK, CINDER})
_WITH_PORTWORX = ALWAYS_ON | {PORTWORX}
#: Every value :func:`migrated` returns.
VARIANTS = (ALWAYS_ON, _WITH_PORTWORX)
# PodInfo.disks kinds of in-tree plugins migrated to CSI.
_DISK_PLUGINS = {
    "gce-pd": GCE_PD,
    "aws-ebs": AWS_EBS,
    "azure-disk": AZURE_DISK,
    "cinder": CINDER,
    "portworx-volume": PORTWORX,
}
_UNSPECIFIED = "UNSPECIFIED"
_BETA_ZONE = "failure-domain.beta.kubernetes.io/zone"
_ZONE = "topology.kubernetes.io/zone"
_BETA_REGION = "failure-domain.beta.kubernetes.io/region"
_REGION = "topology.kubernetes.io/region"
_TOPOLOGY_KEYS = {
    GCE_PD: "topology.gke.io/zone",
    AWS_EBS: "topology.ebs.csi.aws.com/zone",
    CINDER: "topology.cinder.csi.openstack.org/zone",
}


def migrated(node: CSINodeInfo) -> frozenset[str]:
    """The in-tree plugins whose volumes count as their CSI driver's on ``node``."""
    return _WITH_PORTWORX if PORTWORX in node.migrated else ALWAYS_ON


def provisioner_driver(provisioner: str, on: frozenset[str]) -> str:
    """The driver an unprovisioned claim of a class with ``provisioner`` counts under ('':
    not counted)."""
    if provisioner not in DRIVERS:
        return provisioner
    return DRIVERS[provisioner] if provisioner in on else ""


def _gce_handle(pd_name: str, labels: Mapping[str, str]) -> str | None:
    zones = (labels.get(_BETA_ZONE) or labels.get(_ZONE) or "").split("__")
    if len(zones) == 1:
        return f"projects/{_UNSPECIFIED}/zones/{zones[0] or _UNSPECIFIED}/disks/{pd_name}"
    regions = set()
    for zone in zones:
        parts = zone.split("-")
        if len(parts) != 3:
            return None  # kube-scheduler logs the translation error and skips the volume
        regions.add(f"{parts[0]}-{parts[1]}")
    if len(regions) != 1:
        return None
    return f"projects/{_UNSPECIFIED}/regions/{regions.pop()}/disks/{pd_name}"


def _pv_handle(vol: VolumeInfo) -> str | None:
    """The CSI volume handle of in-tree persistent volume ``vol`` (None: the translation
    fails)."""
    plugin, ident = vol.in_tree or ("", "")
    if plugin == GCE_PD:
        return _gce_handle(ident, dict(vol.labels))
    if plugin == AWS_EBS:
        return ebs_volume_id(ident)
    return ident or None  # Azure disk URI ("" when not Managed), Cinder and Portworx IDs


def volume_driver(vol: VolumeInfo, on: frozenset[str]) -> tuple[str, str] | None:
    """(driver, handle) a PersistentVolume counts as, or None."""
    if vol.csi_driver or vol.csi_handle:
        return (vol.csi_driver, vol.csi_handle) if vol.csi_driver and vol.csi_handle else None
    if not vol.in_tree or vol.in_tree[0] not in on:
        return None
    handle = _pv_handle(vol)
    return (DRIVERS[vol.in_tree[0]], handle) if handle else None


def inline_driver(kind: str, ident: str, on: frozenset[str]) -> tuple[str, str] | None:
    """(driver, handle) an inline in-tree disk of the pod counts as, or None (a malformed EBS
    ID, which fails the attempt instead: ``PodInfo.inline_errors``)."""
    plugin = _DISK_PLUGINS.get(kind)
    if plugin is None or plugin not in on:
        return None
    handle: str | None = ident
    if plugin == GCE_PD:
        handle = f"projects/{_UNSPECIFIED}/zones/{_UNSPECIFIED}/disks/{ident}"
    elif plugin == AWS_EBS:
        handle = ebs_volume_id(ident)
    return (DRIVERS[plugin], handle) if handle else None


def _renamed(
    terms: tuple[NodeSelectorTerm, ...], old: str, new: str
) -> tuple[NodeSelectorTerm, ...]:
    return tuple(
        NodeSelectorTerm(
            tuple(
                Requirement(new, r.operator, r.values) if r.key == old else r for r in t.expressions
            ),
            t.fields,
        )
        for t in terms
    )


def _values(terms: tuple[NodeSelectorTerm, ...], key: str) -> list[str]:
    return [v for t in terms for r in t.expressions if r.key == key for v in r.values]


def translated_affinity(vol: VolumeInfo) -> tuple[NodeSelectorTerm, ...] | None:
    """The node affinity of in-tree volume ``vol`` translated for its CSI driver, as
    VolumeBinding checks it on nodes where the plugin is migrated (None: every node). Raises
    ``ValueError`` where the translation fails (a malformed EBS ID, GCE zones of no one
    region), which fails the whole attempt in kube-scheduler."""
    plugin = vol.in_tree[0] if vol.in_tree else ""
    labels = dict(vol.labels)
    if plugin not in DRIVERS or _pv_handle(vol) is None:
        raise ValueError(f"cannot translate volume {vol.name} to CSI")
    if plugin not in _TOPOLOGY_KEYS:
        return vol.node_terms  # Azure disk, Portworx: the topology is not translated
    terms = vol.node_terms or ()
    keys = {r.key for t in terms for r in t.expressions}
    # The zone key: the GA one, unless only the beta one is used (affinity first, then labels).
    if _ZONE not in keys and (_BETA_ZONE in keys or (_ZONE not in labels and _BETA_ZONE in labels)):
        zone, region = _BETA_ZONE, _BETA_REGION
    else:
        zone, region = _ZONE, _REGION
    csi_key = _TOPOLOGY_KEYS[plugin]
    if _values(terms, zone):
        terms = _renamed(terms, zone, csi_key)
    elif zone in labels:
        zones = tuple(sorted({z.strip() for z in labels[zone].split("__")} - {""}))
        if zones:
            extra = Requirement(csi_key, "In", zones)
            terms = tuple(NodeSelectorTerm((*t.expressions, extra), t.fields) for t in terms)
            terms = terms or (NodeSelectorTerm((extra,)),)
    if region == _BETA_REGION and _values(terms, _BETA_REGION):
        terms = _renamed(terms, _BETA_REGION, _REGION)
    return terms if vol.node_terms is not None or terms else None
