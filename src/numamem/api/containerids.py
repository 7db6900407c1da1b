"""Runtime container ids carried by a request for several containers (Admit's
``container_ids``): checked against the pod before anything is decided."""

from __future__ import annotations

from collections.abc import Mapping

from numamem.api.validation import check_string, container_in_pod
from numamem.errors import InvalidArgumentError, quote
from numamem.pod import Pod


def container_ids_in_pod(
    pod: Pod, ids: Mapping[str, str], field: str = "container_ids"
) -> dict[str, str]:
    """``ids`` (container name -> runtime id) as given, checked: each name a container of
    ``pod``, each id non-empty and the id of one container only. ``InvalidArgumentError``
    naming the field, the name and the id otherwise."""
    out: dict[str, str] = {}
    for name, cid in sorted(ids.items()):
        container_in_pod(pod, name, f"{field} key")
        check_string(cid, f"{field}[{quote(name)}]")
        if cid in out.values():
            raise InvalidArgumentError(
                f"{field}[{quote(name)}]: {quote(cid)} is the id of another container too; "
                "a runtime id names one container"
            )
        out[name] = cid
    return out
