"""The field names of the Kubernetes objects in a Pod manifest, for reading it as strictly as
``kubectl apply --validate=strict``: an unknown field is an error naming its path and the
nearest known field, not a silent ``resource:`` that leaves a pod "admitted, not pinned".

The names are the JSON names of the Kubernetes API types (``k8s.io/api/core/v1`` and
``k8s.io/apimachinery/pkg/apis/meta/v1``, as of Kubernetes 1.35): every field of every object
numamem reads and of its siblings, so a manifest exactly as ``kubectl get pod -o yaml``
prints it (status, managedFields, volumes, tolerations, ...) is accepted.

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
from collections.abc import Mapping
from dataclasses import dataclass, field


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
            "resources", "hostnameOverride", "workloadRef",
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
    "ListMeta", frozenset({"selfLink", "resourceVersion", "continue", "remainingItemCount"})
)

LIST = Kind(
    "List",
    frozenset({*TYPE_META, "metadata", "items"}),
    {"metadata": (LIST_META, False), "items": (POD, True)},
)

_LISTED = 6
"""A kind with at most this many fields lists them when a field is unknown and none is near."""


class SchemaError(ValueError):
    """A manifest's field is unknown or of the wrong shape; the message names its path."""


def check(doc: object, kind: Kind, path: str = "") -> None:
    """Raise SchemaError at the first unknown field (in document order) of ``doc`` read as
    ``kind``, or the first checked field that is not a mapping (a list of mappings)."""
    if doc is None:
        return
    if not isinstance(doc, dict):
        raise SchemaError(f"{path or 'the document'}: expected {_a(kind)} (a mapping)")
    for key, value in doc.items():
        name = str(key)
        here = f"{path}.{shown(name)}" if path else shown(name)
        if name not in kind.fields:
            raise SchemaError(f"{here}: unknown field of {_a(kind)}{_hint(name, kind)}")
        if name not in kind.nested or value is None:
            continue
        child, many = kind.nested[name]
        if not many:
            check(value, child, here)
            continue
        if not isinstance(value, list):
            raise SchemaError(f"{here}: expected a list of {child.name}s")
        for i, item in enumerate(value):
            if item is None:
                raise SchemaError(f"{here}[{i}]: expected {_a(child)} (a mapping), got null")
            check(item, child, f"{here}[{i}]")


def nearest(name: str, known: frozenset[str]) -> str | None:
    """The known field ``name`` most likely meant: one that differs only in case, ``-`` or
    ``_`` (``init_containers``, ``InitContainers``), else the closest spelling."""
    folded = {_fold(k): k for k in known}
    if _fold(name) in folded:
        return folded[_fold(name)]
    close = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
    return close[0] if close else None


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
    """A key from the manifest in a path: as it is, or escaped when it is not plain text."""
    if name.isprintable() and name.strip() == name and name:
        return name
    from numamem.errors import quote

    return quote(name)
