"""Namespaces for a control plane without controller-manager.

Without the service-account controller no namespace gets its ``default`` ServiceAccount, and
the ServiceAccount admission plugin refuses pods that use it; nor does ``kube-root-ca.crt``
appear. :func:`ensure_namespace` creates all three.
"""

from __future__ import annotations

from collections.abc import Mapping

from fairgpu.devcluster.client import ApiError, KubeClient

__all__ = ["ensure_namespace"]


def ensure_namespace(
    client: KubeClient,
    name: str,
    *,
    labels: Mapping[str, str] | None = None,
    ca_pem: str | None = None,
) -> None:
    """Create namespace ``name`` with its ``default`` ServiceAccount; existing ones are kept.

    Args:
        client: API client with rights to create namespaces and service accounts.
        name: namespace name.
        labels: labels for a newly created namespace.
        ca_pem: if given, also create the ``kube-root-ca.crt`` ConfigMap with this CA.
    """
    ns_body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": dict(labels or {})},
    }
    _create(client, "/api/v1/namespaces", ns_body)
    sa_body = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "default", "namespace": name},
    }
    _create(client, f"/api/v1/namespaces/{name}/serviceaccounts", sa_body)
    if ca_pem is not None:
        cm_body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "kube-root-ca.crt", "namespace": name},
            "data": {"ca.crt": ca_pem},
        }
        _create(client, f"/api/v1/namespaces/{name}/configmaps", cm_body)


def _create(client: KubeClient, path: str, body: Mapping[str, object]) -> None:
    resp = client.request("POST", path, body)
    if resp.ok or resp.status == 409:
        return
    raise ApiError("POST", path, resp)
