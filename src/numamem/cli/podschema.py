"""The field names of the Kubernetes objects in a Pod manifest, for reading it as strictly as
``kubectl apply --validate=strict``: an unknown field is an error naming its path and the
nearest known field, not a silent ``resource:`` that leaves a pod "admitted, not pinned".
``--validate=warn`` makes each one a warning and ``--validate=ignore`` says nothing
(kubectl's names): :func:`check` hands every unknown field to a callback.

The names are the JSON names of the Kubernetes API types (``k8s.io/api/core/v1`` and
``k8s.io/apimachinery/pkg/apis/meta/v1``) of Kubernetes :data:`KUBERNETES_VERSION`, the
newest release checked (against the generated bindings of its OpenAPI schema), plus the
fields older releases had (``spec.workloadRef``, 1.35's, replaced by ``schedulingGroup``
in 1.36): every field of every object numamem reads and of its siblings, so a manifest
exactly as ``kubectl get pod -o yaml`` prints it (status, managedFields, volumes,
tolerations, ...) is accepted. A field of a newer Kubernetes is refused in strict mode,
with a message that says so (``--validate=warn`` then reads the manifest).

Checked: the Pod (and a ``List``/``PodList`` of them with its ``ListMeta``), its
``ObjectMeta``, ``PodSpec`` and ``PodStatus``, every ``Container`` of ``initContainers`` and
``containers``, and every ``ResourceRequirements`` (a container's, the pod-level
``spec.resources``, ``status.resources``). Not checked, on purpose: the contents of the
other fields (volumes, affinity, securityContext, probes, env, ports, tolerations,
ephemeralContainers, containerStatuses, conditions, managedFields, labels, ...). numamem reads
nothing in them, so a typo there changes nothing it decides; checking them would need the
whole OpenAPI schema (hundreds of types, changing every release) for no decision of numamem's,
and the API server validates them when the pod is created. The resource names under
``requests``/``limits`` are free-form (extended resources); their quantities are validated by
the daemon (INVALID_QUANTITY).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from numamem.errors import QUOTE_BYTES, quote

KUBERNETES_VERSION = "1.37"
"""The newest Kubernetes whose Pod fields the kinds below hold."""

Validation = Literal["strict", "warn", "ignore"]
"""``--validate``: unknown fields are errors, warnings, or nothing (kubectl's names)."""
VALIDATIONS: tuple[Validation, ...] = ("strict", "warn", "ignore")


@dataclass(frozen=True)
class Kind:
    """A Kubernetes type: its name (for messages), its fields, and which of them are checked
    further (field -> (kind, whether the field is a list of it))."""

    name: str
    fields: frozenset[str]
    nested: Mapping[str, tuple[Kind, bool]] = field(default_factory=dict)


TYPE_META = ("apiVersion", "kind")

OBJECT_META = Kind(
    "ObjectMeta",
    frozenset(
        {
            "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion",
            "generation", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds",
            "labels", "annotations", "ownerReferences", "finalizers", "managedFields",
        }
    ),
)  # fmt: skip

RESOURCE_REQUIREMENTS = Kind("ResourceRequirements", frozenset({"limits", "requests", "claims"}))

CONTAINER = Kind(
    "Container",
    frozenset(
        {
            "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env",
            "resources", "resizePolicy", "restartPolicy", "restartPolicyRules", "volumeMounts",
            "volumeDevices", "livenessProbe", "readinessProbe", "startupProbe", "lifecycle",
            "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
            "securityContext", "stdin", "stdinOnce", "tty",
        }
    ),
    {"resources": (RESOURCE_REQUIREMENTS, False)},
)  # fmt: skip

POD_SPEC = Kind(
    "PodSpec",
    frozenset(
        {
            "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
            "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy",
            "nodeSelector", "serviceAccountName", "serviceAccount",
            "automountServiceAccountToken", "nodeName", "hostNetwork", "hostPID", "hostIPC",
            "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
            "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases",
            "priorityClassName", "priority", "dnsConfig", "readinessGates", "runtimeClassName",
            "enableServiceLinks", "preemptionPolicy", "overhead", "topologySpreadConstraints",
            "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims",
            "resources", "hostnameOverride", "workloadRef", "schedulingGroup",
            "evictionResponders",
        }
    ),
    {
        "initContainers": (CONTAINER, True),
        "containers": (CONTAINER, True),
        "resources": (RESOURCE_REQUIREMENTS, False),
    },
)  # fmt: skip

POD_STATUS = Kind(
    "PodStatus",
    frozenset(
        {
            "observedGeneration", "phase", "conditions", "message", "reason",
            "nominatedNodeName", "hostIP", "hostIPs", "podIP", "podIPs", "startTime",
            "initContainerStatuses", "containerStatuses", "qosClass",
            "ephemeralContainerStatuses", "resize", "resourceClaimStatuses",
            "extendedResourceClaimStatus", "allocatedResources", "resources",
            "nodeAllocatableResourceClaimStatuses", "volumeHealth",
        }
    ),
    {"resources": (RESOURCE_REQUIREMENTS, False)},
)  # fmt: skip

POD = Kind(
    "Pod",
    frozenset({*TYPE_META, "metadata", "spec", "status"}),
    {
        "metadata": (OBJECT_META, False),
        "spec": (POD_SPEC, False),
        "status": (POD_STATUS, False),
    },
)

LIST_META = Kind(
    "ListMeta",
    frozenset({"selfLink", "resourceVersion", "continue", "remainingItemCount", "shardInfo"}),
)

LIST = Kind(
    "List",
    frozenset({*TYPE_META, "metadata", "items"}),
    {"metadata": (LIST_META, False)},
)
"""A List's own fields; its items are checked one by one as Pods once their kind is known
(:mod:`numamem.cli.podfile`), so that a Service in it is named as such."""

_LISTED = 6
"""A kind with at most this many fields lists them when a field is unknown and none is near."""


class SchemaError(ValueError):
    """A manifest's field is unknown or of the wrong shape; the message names its path."""


Unknown = Callable[[str, "Kind", str], None]
"""Told of an unknown field: its path (for messages), the kind it is not a field of, its
name. :func:`refuse` raises; a reader in ``warn`` mode prints :func:`unknown_field`."""


MAX_SUGGESTIONS = 32
"""The unknown fields of one manifest that ``--validate=warn`` looks for a nearest known
field for (difflib: 73 µs for a 20-character name against a Container's 25 fields; a
1 MB manifest of 30,000 such names took 3.5 s to read, 2.6 s of it suggesting); the
warnings after them name the field only."""


def unknown_field(path: str, kind: Kind, name: str, *, suggest: bool = True) -> str:
    """``<path>: unknown field of a <Kind>`` and (``suggest``) the nearest known field, or
    the kind's fields when it has few."""
    return f"{path}: unknown field of {_a(kind)}{_hint(name, kind) if suggest else ''}"


def refuse(path: str, kind: Kind, name: str) -> None:
    """``--validate=strict``: an unknown field is a SchemaError. When no known field is near
    it, the message says which Kubernetes numamem knows and how to read a newer one's."""
    message = unknown_field(path, kind, name)
    if nearest(name, kind.fields) is None:
        message += (
            f"; numamem knows the fields of Kubernetes {KUBERNETES_VERSION}: if this one is "
            "from a newer Kubernetes, pass --validate=warn"
        )
    raise SchemaError(message)


def check(doc: object, kind: Kind, path: str = "", unknown: Unknown = refuse) -> None:
    """Walk ``doc`` read as ``kind``: each unknown field (in document order) goes to
    ``unknown`` (its value is not walked), the first checked field that is not a mapping (a
    list of mappings) raises SchemaError."""
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise SchemaError(f"{path or 'the document'}: expected {_a(kind)} (a mapping)")
    for key, value in doc.items():
        name = str(key)
        here = f"{path}.{shown(name)}" if path else shown(name)
        if name not in kind.fields:
            unknown(here, kind, name)
            continue
        if name not in kind.nested or value is None:
            continue
        child, many = kind.nested[name]
        if not many:
            check(value, child, here, unknown)
            continue
        if not isinstance(value, list):
            raise SchemaError(f"{here}: expected a list of {child.name}s")
        for i, item in enumerate(value):
            if item is None:
                raise SchemaError(f"{here}[{i}]: expected {_a(child)} (a mapping), got null")
            check(item, child, f"{here}[{i}]", unknown)


def nearest(name: str, known: frozenset[str]) -> str | None:
    """The known field ``name`` most likely meant: one that differs only in case, ``-`` or
    ``_`` (``init_containers``, ``InitContainers``), else the closest spelling."""
    folded = {_fold(k): k for k in known}
    if _fold(name) in folded:
        return folded[_fold(name)]
    # difflib's ratio is at most 2 * len(known) / (len(name) + len(known)): a name longer
    # than this reaches the cutoff with no known field, so it is not compared (its cost
    # grows with its length).
    if not known or len(name) > max(map(len, known)) * (2 - _CUTOFF) / _CUTOFF:
        return None
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=_CUTOFF)
    return close[0] if close else None


_CUTOFF = 0.6


def _hint(name: str, kind: Kind) -> str:
    best = nearest(name, kind.fields)
    if best is not None:
        return f"; did you mean '{best}'?"
    if len(kind.fields) <= _LISTED:
        return f" (its fields: {', '.join(sorted(kind.fields))})"
    return ""


def _a(kind: Kind) -> str:
    return f"{'an' if kind.name[0] in 'AEIOU' else 'a'} {kind.name}"


def _fold(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def shown(name: str) -> str:
    """A key from the manifest in a path: as it is, or quoted (escaped, and cut to
    :data:`~numamem.errors.QUOTE_BYTES` bytes with its length) when it is not short plain
    text."""
    if name and len(name) <= QUOTE_BYTES and name.isprintable() and name.strip() == name:
        return name
    return quote(name)
