"""Kubernetes Pod manifests (YAML or JSON) -> ``numamem.v1.Pod``.

Reads ``metadata.uid/name/namespace``, ``spec.initContainers`` and
``spec.containers`` (``name``, ``resources.requests/limits``,
``restartPolicy``), the pod-level ``spec.resources.requests/limits`` (KEP-2837)
and ``status.qosClass``. ``metadata.uid`` is required: the
memory manager keys its state by pod uid, and ``kubectl get pod NAME -o yaml``
prints it. :func:`load_pods` also reads ``kind: List`` documents (``kubectl get
pods -o yaml``) and several YAML documents in one file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from numamem.errors import quote
from numamem.v1 import memorymanager_pb2


class PodFileError(Exception):
    """The manifest cannot be read or is not a Pod; the message names the file and field."""


def load_pod(path: str) -> memorymanager_pb2.Pod:
    """The one Pod in ``path`` (``-`` for stdin)."""
    pods = load_pods(path)
    if len(pods) != 1:
        raise PodFileError(f"{path}: expected one Pod, found {len(pods)}")
    return pods[0]


def load_pods(path: str) -> list[memorymanager_pb2.Pod]:
    """Every Pod in ``path``: a Pod, a ``kind: List`` of Pods, or several YAML documents."""
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PodFileError(f"{path}: cannot read: {err.strerror}") from err
    try:
        docs = [d for d in yaml.safe_load_all(text) if d is not None]  # JSON is YAML
    except yaml.YAMLError as err:
        raise PodFileError(f"{path}: not valid YAML or JSON: {err}") from err
    pods = []
    for where, doc in _documents(path, docs):
        pods.append(_pod(doc, where))
    return pods


def _documents(path: str, docs: list[Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    for n, doc in enumerate(docs):
        where = path if len(docs) == 1 else f"{path} (document {n + 1})"
        if not isinstance(doc, dict):
            raise PodFileError(
                f"{where}: expected a Pod manifest (a mapping), got {type(doc).__name__}"
            )
        if doc.get("kind") == "List":
            items = doc.get("items") or []
            if not isinstance(items, list):
                raise PodFileError(f"{where}: items: expected a list")
            for i, item in enumerate(items):
                if not isinstance(item, dict):
                    raise PodFileError(f"{where}: items[{i}]: expected a Pod manifest")
                yield f"{where}: items[{i}]", item
        else:
            yield where, doc


def _pod(doc: dict[str, Any], path: str) -> memorymanager_pb2.Pod:
    kind = doc.get("kind", "Pod")
    if kind != "Pod":
        raise PodFileError(f"{path}: kind is {quote(kind)}, expected 'Pod'")
    meta = _mapping(doc.get("metadata"), f"{path}: metadata")
    spec = _mapping(doc.get("spec"), f"{path}: spec")
    status = _mapping(doc.get("status"), f"{path}: status")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or "")
    if not uid:
        raise PodFileError(
            f"{path}: metadata.uid is missing: the memory manager keys its state by pod uid; take "
            f"the manifest from the API server (kubectl get pod {name or 'NAME'} -o yaml) or add a "
            "metadata.uid"
        )
    pod_requests, pod_limits = _resources(spec.get("resources"), f"{path}: spec.resources")
    return memorymanager_pb2.Pod(
        uid=uid,
        namespace=namespace,
        name=name,
        requests=pod_requests,
        limits=pod_limits,
        init_containers=[
            _container(c, f"{path}: spec.initContainers[{i}]")
            for i, c in enumerate(spec.get("initContainers") or [])
        ],
        containers=[
            _container(c, f"{path}: spec.containers[{i}]")
            for i, c in enumerate(spec.get("containers") or [])
        ],
        qos_class=str(status.get("qosClass") or ""),
    )


def _mapping(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodFileError(f"{where}: expected a mapping")
    return value


def _resources(value: Any, where: str) -> tuple[dict[str, str], dict[str, str]]:
    """``resources.requests`` and ``resources.limits`` as quantity strings."""
    resources = _mapping(value, where)
    requests = _mapping(resources.get("requests"), f"{where}.requests")
    limits = _mapping(resources.get("limits"), f"{where}.limits")
    return (
        {str(k): str(v) for k, v in requests.items()},
        {str(k): str(v) for k, v in limits.items()},
    )


def _container(value: Any, where: str) -> memorymanager_pb2.Container:
    c = _mapping(value, where)
    requests, limits = _resources(c.get("resources"), f"{where}.resources")
    return memorymanager_pb2.Container(
        name=str(c.get("name") or ""),
        requests=requests,
        limits=limits,
        restart_policy=str(c.get("restartPolicy") or ""),
    )
