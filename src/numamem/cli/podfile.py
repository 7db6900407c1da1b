"""Kubernetes Pod manifests (YAML or JSON) -> ``numamem.v1.Pod``.

Reads ``metadata.uid/name/namespace``, ``spec.initContainers`` and
``spec.containers`` (``name``, ``resources.requests/limits``,
``restartPolicy``), the pod-level ``spec.resources.requests/limits`` (KEP-2837)
and ``status.qosClass``. ``metadata.uid`` is required: the
memory manager keys its state by pod uid, and ``kubectl get pod NAME -o yaml``
prints it. :func:`load_pods` also reads ``kind: List`` documents (``kubectl get
pods -o yaml``) and several YAML documents in one file.

As strict as ``kubectl apply --validate=strict`` where numamem reads
(:mod:`numamem.cli.podschema` says which objects are checked, and why the others are not):
an unknown field (``resource:`` for ``resources:``, ``limts:``), a field given twice, a
resource quantity that is not a string or a number, an ``apiVersion`` other than ``v1`` is
a :class:`PodFileError` naming the file, the field's path and the nearest known field. The
commands exit 1 for it, as for any input that cannot be read (not 2: the command line is
right, the manifest is not).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from numamem.cli import podschema
from numamem.errors import quote
from numamem.v1 import memorymanager_pb2

LIST_KINDS = ("List", "PodList")
"""``kubectl get pods -o yaml`` prints a ``List``; the API's own list is a ``PodList``."""


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
    except UnicodeDecodeError as err:
        raise PodFileError(f"{path}: not UTF-8 text: {err}") from err
    try:
        docs = [d for d in yaml.load_all(text, Loader=_StrictLoader) if d is not None]
    except DuplicateFieldError as err:
        raise PodFileError(f"{path}: {err}") from err
    except yaml.YAMLError as err:
        raise PodFileError(f"{path}: not valid YAML or JSON: {err}") from err
    pods = []
    for where, doc, at in _documents(path, docs):
        pods.append(_pod(doc, where, at))
    return pods


class DuplicateFieldError(yaml.YAMLError):
    """A mapping of the manifest names a field twice (YAML would keep the last silently)."""


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` (JSON is YAML) that refuses a field given twice in one mapping, as
    ``kubectl --validate=strict`` does."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping says so
            if duplicate:
                line = key_node.start_mark.line + 1
                raise DuplicateFieldError(
                    f"line {line}: duplicate field {quote(str(key))} (YAML would keep only the "
                    "last one; kubectl --validate=strict refuses it too)"
                )
        return super().construct_mapping(node, deep=deep)


def _documents(path: str, docs: list[Any]) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(file and document for messages, the Pod, its path in the document) of every Pod."""
    for n, doc in enumerate(docs):
        where = path if len(docs) == 1 else f"{path} (document {n + 1})"
        if not isinstance(doc, dict):
            raise PodFileError(
                f"{where}: expected a Pod manifest (a mapping), got {type(doc).__name__}"
            )
        kind = doc.get("kind", "Pod")
        listed = kind in LIST_KINDS
        if kind != "Pod" and not listed:
            raise PodFileError(f"{where}: kind is {quote(str(kind))}, expected 'Pod' or 'List'")
        api_version = doc.get("apiVersion", "v1")
        if api_version != "v1":
            raise PodFileError(
                f"{where}: apiVersion is {quote(str(api_version))}, expected 'v1' (a {kind} is "
                "in the core API group)"
            )
        try:
            podschema.check(doc, podschema.LIST if listed else podschema.POD)
        except podschema.SchemaError as err:
            raise PodFileError(f"{where}: {err}") from err
        if not listed:
            yield where, doc, ""
            continue
        for i, item in enumerate(doc.get("items") or []):
            at = f"items[{i}]"
            if item.get("kind", "Pod") != "Pod":
                raise PodFileError(
                    f"{where}: {at}.kind is {quote(str(item['kind']))}, expected 'Pod'"
                )
            if item.get("apiVersion", "v1") != "v1":
                raise PodFileError(
                    f"{where}: {at}.apiVersion is {quote(str(item['apiVersion']))}, expected 'v1'"
                )
            yield where, item, at + "."


def _pod(doc: dict[str, Any], where: str, at: str) -> memorymanager_pb2.Pod:
    """The Pod ``doc`` (checked by :func:`podschema.check`), ``at`` its path in the document."""
    meta = doc.get("metadata") or {}
    spec = doc.get("spec") or {}
    status = doc.get("status") or {}
    namespace = _text(meta.get("namespace"), where, f"{at}metadata.namespace") or "default"
    name = _text(meta.get("name"), where, f"{at}metadata.name")
    uid = _text(meta.get("uid"), where, f"{at}metadata.uid")
    if not uid:
        raise PodFileError(
            f"{where}: {at}metadata.uid is missing: the memory manager keys its state by pod "
            f"uid; take the manifest from the API server (kubectl get pod {name or 'NAME'} -o "
            "yaml) or add a metadata.uid"
        )
    pod_requests, pod_limits = _resources(spec.get("resources"), where, f"{at}spec.resources")
    return memorymanager_pb2.Pod(
        uid=uid,
        namespace=namespace,
        name=name,
        requests=pod_requests,
        limits=pod_limits,
        init_containers=[
            _container(c, where, f"{at}spec.initContainers[{i}]")
            for i, c in enumerate(spec.get("initContainers") or [])
        ],
        containers=[
            _container(c, where, f"{at}spec.containers[{i}]")
            for i, c in enumerate(spec.get("containers") or [])
        ],
        qos_class=_text(status.get("qosClass"), where, f"{at}status.qosClass"),
    )


def _text(value: Any, where: str, path: str) -> str:
    """A name or uid: a string (a number YAML read from an unquoted ``uid: 123`` too)."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise PodFileError(f"{where}: {path}: expected a string, got {_shape(value)}")
    return str(value)


def _resources(value: Any, where: str, path: str) -> tuple[dict[str, str], dict[str, str]]:
    """``resources.requests`` and ``resources.limits`` as quantity strings."""
    resources = value or {}
    return (
        _quantities(resources.get("requests"), where, f"{path}.requests"),
        _quantities(resources.get("limits"), where, f"{path}.limits"),
    )


def _quantities(value: Any, where: str, path: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise PodFileError(f"{where}: {path}: expected a mapping of resource names to quantities")
    out = {}
    for name, quantity in value.items():
        if isinstance(quantity, bool) or not isinstance(quantity, str | int | float):
            raise PodFileError(
                f"{where}: {path}.{podschema.shown(str(name))}: expected a quantity (a string "
                f"such as 1Gi, or a number), got {_shape(quantity)}"
            )
        out[str(name)] = str(quantity)
    return out


def _container(c: dict[str, Any], where: str, path: str) -> memorymanager_pb2.Container:
    requests, limits = _resources(c.get("resources"), where, f"{path}.resources")
    return memorymanager_pb2.Container(
        name=_text(c.get("name"), where, f"{path}.name"),
        requests=requests,
        limits=limits,
        restart_policy=_text(c.get("restartPolicy"), where, f"{path}.restartPolicy"),
    )


def _shape(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {quote(str(value))}"
