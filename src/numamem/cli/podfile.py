"""Kubernetes Pod manifests (YAML or JSON) -> ``numamem.v1.Pod``.

Reads ``metadata.uid/name/namespace``, ``spec.initContainers`` and
``spec.containers`` (``name``, ``resources.requests/limits``,
``restartPolicy``), the pod-level ``spec.resources.requests/limits`` (KEP-2837)
and ``status.qosClass``. ``metadata.uid`` is required: the
memory manager keys its state by pod uid, and ``kubectl get pod NAME -o yaml``
prints it. :func:`load_pods` also reads ``kind: List`` documents (``kubectl get
pods -o yaml``) and several YAML documents in one file. YAML merge keys
(``<<: *base``) are read as YAML defines them.

As strict as ``kubectl apply --validate=strict`` by default, where numamem reads
(:mod:`numamem.cli.podschema` says which objects are checked, and why the others are not):
an unknown field (``resource:`` for ``resources:``, ``limts:``) or a field given twice is a
:class:`PodFileError` naming the file, the field's path and the nearest known field.
``validate="warn"`` prints one warning line on stderr for each instead and reads the
manifest; ``"ignore"`` says nothing (kubectl's ``--validate`` values, which every command
that reads manifests takes). A resource quantity that is not a string or a number, a
checked object that is not a mapping, a kind other than Pod (a List's items included, each
checked before it is read) or an ``apiVersion`` other than ``v1`` is a PodFileError in
every mode. The commands exit 1 for it, as for any input that cannot be read (not 2: the
command line is right, the manifest is not).

Bounded work (issue 38): a manifest is read within :mod:`numamem.config.yamlbounds`' bounds
(at most :data:`MAX_MANIFEST_BYTES`, nested at most ``MAX_DEPTH`` deep, and at most
:data:`MIN_VALUE_BOUND` values or one per byte of the manifest, the larger, with YAML
aliases expanded: a few bytes of aliases naming thousands of containers are refused before
anything is built), and holds at most :data:`MAX_PODS` pods and :data:`MAX_CONTAINERS`
containers. Each refusal names its bound.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterator
from typing import Any

import yaml

from numamem.cli import podschema
from numamem.cli.podschema import Validation
from numamem.config.yamlbounds import compose_all_bounded, read_bounded
from numamem.errors import ConfigError, quote
from numamem.v1 import memorymanager_pb2

LIST_KINDS = ("List", "PodList")
"""``kubectl get pods -o yaml`` prints a ``List``; the API's own list is a ``PodList``."""
MAX_MANIFEST_BYTES = 16 << 20
"""The most bytes read of a manifest (``kubectl get pods -o yaml`` of a node's pods, with
managedFields, is a few MiB)."""
MIN_VALUE_BOUND = 100_000
"""A manifest may hold this many values (or one per byte, the larger) with aliases expanded."""
MAX_PODS = 5_000
"""The most pods one manifest file may list (a node runs a few hundred at most)."""
MAX_CONTAINERS = 50_000
"""The most containers (init containers included) of all the pods of one file."""

Warn = Callable[[str], None]


class PodFileError(Exception):
    """The manifest cannot be read or is not a Pod; the message names the file and field."""


def add_validate_argument(parser: argparse.ArgumentParser) -> None:
    """``--validate``, as kubectl names it, for a command that reads manifests."""
    parser.add_argument(
        "--validate",
        default="strict",
        type=validation,
        metavar="{strict,warn,ignore}",
        help="unknown or repeated fields in the manifest: strict (the default, as kubectl's) "
        "refuses them, warn prints a warning for each and reads the manifest, ignore reads it "
        f"silently; numamem knows the fields of Kubernetes {podschema.KUBERNETES_VERSION} "
        "(kubectl's true and false mean strict and ignore)",
    )


def validation(text: str) -> Validation:
    """A ``--validate`` value (argparse type)."""
    value = {"true": "strict", "false": "ignore"}.get(text, text)
    for known in podschema.VALIDATIONS:
        if value == known:
            return known
    raise argparse.ArgumentTypeError(f"{quote(text)}: expected strict, warn or ignore")


def warn_on_stderr(message: str) -> None:
    print(f"numamem: warning: {message}", file=sys.stderr)


def load_pod(
    path: str, validate: Validation = "strict", warn: Warn = warn_on_stderr
) -> memorymanager_pb2.Pod:
    """The one Pod in ``path`` (``-`` for stdin)."""
    pods = load_pods(path, validate, warn)
    if len(pods) != 1:
        raise PodFileError(f"{path}: expected one Pod, found {len(pods)}")
    return pods[0]


def load_pods(
    path: str, validate: Validation = "strict", warn: Warn = warn_on_stderr
) -> list[memorymanager_pb2.Pod]:
    """Every Pod in ``path``: a Pod, a ``kind: List`` of Pods, or several YAML documents.
    ``validate``: what an unknown or repeated field is (see the module); ``warn`` prints a
    warning."""
    try:
        docs = _read(path, validate, warn)
    except ConfigError as err:  # a bound
        raise PodFileError(str(err)) from err
    except DuplicateFieldError as err:
        raise PodFileError(f"{path}: {err}") from err
    except yaml.YAMLError as err:
        raise PodFileError(f"{path}: not valid YAML or JSON{_yaml_problem(err)}") from err
    pods: list[memorymanager_pb2.Pod] = []
    containers = 0
    for where, doc, at in _documents(path, docs, validate, warn):
        if len(pods) == MAX_PODS:
            raise PodFileError(f"{where}: more than {MAX_PODS} pods (MAX_PODS); split the file")
        spec = doc.get("spec")
        if isinstance(spec, dict):
            for field in ("initContainers", "containers"):
                listed = spec.get(field)
                containers += len(listed) if isinstance(listed, list) else 0
        if containers > MAX_CONTAINERS:
            raise PodFileError(
                f"{where}: {at}spec: more than {MAX_CONTAINERS} containers in the file "
                "(MAX_CONTAINERS); split the file"
            )
        pods.append(_pod(doc, where, at))
    return pods


def _yaml_problem(err: yaml.YAMLError) -> str:
    """`` at line N: <problem> (<context>)``, on one line, as far as PyYAML says."""
    mark = getattr(err, "problem_mark", None)
    where = f" at line {mark.line + 1}" if mark is not None else ""
    problem = getattr(err, "problem", None) or (None if mark is not None else str(err))
    context = getattr(err, "context", None)
    why = f": {quote(problem, style='bare')}" if problem else ""
    return where + why + (f" ({quote(context, style='bare')})" if context else "")


def _read(path: str, validate: Validation, warn: Warn) -> list[Any]:
    """The documents of ``path`` (empty ones left out), within the bounds of the module."""
    try:
        if path == "-":
            text = sys.stdin.read(MAX_MANIFEST_BYTES + 1)
            if len(text) > MAX_MANIFEST_BYTES:
                raise ConfigError(f"-: longer than {MAX_MANIFEST_BYTES} bytes (MAX_MANIFEST_BYTES)")
        else:
            text = read_bounded(path, path, MAX_MANIFEST_BYTES, "MAX_MANIFEST_BYTES")
    except OSError as err:
        raise PodFileError(f"{path}: cannot read: {err.strerror}") from err
    except UnicodeDecodeError as err:
        raise PodFileError(f"{path}: not UTF-8 text: {err}") from err
    bound = f"MAX_VALUES: {MIN_VALUE_BOUND} or one per byte of the manifest, the larger"
    nodes = compose_all_bounded(text, path, max(MIN_VALUE_BOUND, len(text)), bound)
    docs = []
    for node in nodes:
        loader = _StrictLoader("")
        loader.validate, loader.warn, loader.path = validate, warn, path
        docs.append(loader.construct_document(node))
    return [d for d in docs if d is not None]


class DuplicateFieldError(yaml.YAMLError):
    """A mapping of the manifest names a field twice (YAML would keep the last silently)."""


_MERGE = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    """``yaml.safe_load`` (JSON is YAML) that refuses a field given twice in one mapping, as
    ``kubectl --validate=strict`` does (``warn``: a warning; ``ignore``: YAML's last one
    wins). Merge keys (``<<``) are flattened as YAML defines them: a key of the mapping
    overrides a merged one, which is no repetition."""

    validate: Validation = "strict"
    warn: Warn = staticmethod(warn_on_stderr)
    path = ""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            if key_node.tag == _MERGE or self.validate == "ignore":
                continue
            key = self.construct_object(key_node, deep=deep)
            try:
                duplicate = key in seen
                seen.add(key)
            except TypeError:
                continue  # an unhashable key: construct_mapping says so
            if duplicate:
                line = key_node.start_mark.line + 1
                if self.validate == "warn":
                    self.warn(
                        f"{self.path}: line {line}: duplicate field {quote(str(key))} "
                        "(YAML keeps only the last one)"
                    )
                    continue
                raise DuplicateFieldError(
                    f"line {line}: duplicate field {quote(str(key))} (YAML would keep only the "
                    "last one; kubectl --validate=strict refuses it too)"
                )
        return super().construct_mapping(node, deep=deep)


def _unknown(
    where: str, validate: Validation, warn: Warn, suggested: list[int]
) -> podschema.Unknown:
    """What an unknown field of a document at ``where`` does in mode ``validate``;
    ``suggested``: the file's count of warnings with a nearest field, at most
    :data:`~numamem.cli.podschema.MAX_SUGGESTIONS` (shared by its documents)."""
    if validate == "strict":
        return podschema.refuse
    if validate == "warn":

        def warn_unknown(path: str, kind: podschema.Kind, name: str) -> None:
            suggest = suggested[0] < podschema.MAX_SUGGESTIONS
            suggested[0] += suggest
            warn(f"{where}: {podschema.unknown_field(path, kind, name, suggest=suggest)}")

        return warn_unknown
    return lambda path, kind, name: None


def _documents(
    path: str, docs: list[Any], validate: Validation, warn: Warn
) -> Iterator[tuple[str, dict[str, Any], str]]:
    """(file and document for messages, the Pod, its path in the document) of every Pod,
    each checked (:func:`podschema.check`) before it is yielded."""
    suggested = [0]
    for n, doc in enumerate(docs):
        where = path if len(docs) == 1 else f"{path} (document {n + 1})"
        unknown = _unknown(where, validate, warn, suggested)
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
        _check(doc, podschema.LIST if listed else podschema.POD, where, "", unknown)
        if not listed:
            yield where, doc, ""
            continue
        items = doc.get("items") or []
        if not isinstance(items, list):
            raise PodFileError(f"{where}: items: expected a list of Pods")
        for i, item in enumerate(items):
            at = f"items[{i}]"
            if not isinstance(item, dict):
                raise PodFileError(f"{where}: {at}: expected a Pod (a mapping), got {_shape(item)}")
            if item.get("kind", "Pod") != "Pod":
                raise PodFileError(
                    f"{where}: {at}.kind is {quote(str(item['kind']))}, expected 'Pod'"
                )
            if item.get("apiVersion", "v1") != "v1":
                raise PodFileError(
                    f"{where}: {at}.apiVersion is {quote(str(item['apiVersion']))}, expected 'v1'"
                )
            _check(item, podschema.POD, where, at, unknown)
            yield where, item, at + "."


def _check(
    doc: dict[str, Any], kind: podschema.Kind, where: str, at: str, unknown: podschema.Unknown
) -> None:
    try:
        podschema.check(doc, kind, at, unknown)
    except podschema.SchemaError as err:
        raise PodFileError(f"{where}: {err}") from err


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
