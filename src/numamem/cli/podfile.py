"""Kubernetes Pod manifests (YAML or JSON) -> ``numamem.v1.Pod``.

Reads ``metadata.uid/name/namespace``, ``spec.initContainers`` and
``spec.containers`` (``name``, ``resources.requests/limits``,
``restartPolicy``) and ``status.qosClass``. A manifest without
``metadata.uid`` (the API server assigns uids) gets ``<namespace>/<name>``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import yaml

from numamem.v1 import memorymanager_pb2


class PodFileError(Exception):
    """The manifest cannot be read or is not a Pod; the message names the file and field."""


def load_pod(path: str) -> memorymanager_pb2.Pod:
    try:
        text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise PodFileError(f"{path}: cannot read: {err.strerror}") from err
    try:
        doc = yaml.safe_load(text)  # JSON is YAML
    except yaml.YAMLError as err:
        raise PodFileError(f"{path}: not valid YAML or JSON: {err}") from err
    if not isinstance(doc, dict):
        raise PodFileError(f"{path}: expected a Pod manifest (a mapping), got {type(doc).__name__}")
    kind = doc.get("kind", "Pod")
    if kind != "Pod":
        raise PodFileError(f"{path}: kind is {kind!r}, expected 'Pod'")
    meta = _mapping(doc.get("metadata"), f"{path}: metadata")
    spec = _mapping(doc.get("spec"), f"{path}: spec")
    status = _mapping(doc.get("status"), f"{path}: status")
    namespace = str(meta.get("namespace") or "default")
    name = str(meta.get("name") or "")
    uid = str(meta.get("uid") or (f"{namespace}/{name}" if name else ""))
    if not uid:
        raise PodFileError(f"{path}: metadata needs a uid or a name")
    return memorymanager_pb2.Pod(
        uid=uid,
        namespace=namespace,
        name=name,
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


def _container(value: Any, where: str) -> memorymanager_pb2.Container:
    c = _mapping(value, where)
    resources = _mapping(c.get("resources"), f"{where}.resources")
    return memorymanager_pb2.Container(
        name=str(c.get("name") or ""),
        requests={
            str(k): str(v)
            for k, v in _mapping(resources.get("requests"), f"{where}.resources.requests").items()
        },
        limits={
            str(k): str(v)
            for k, v in _mapping(resources.get("limits"), f"{where}.resources.limits").items()
        },
        restart_policy=str(c.get("restartPolicy") or ""),
    )
