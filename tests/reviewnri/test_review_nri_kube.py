"""REVIEW (reviewnri): the QoS class of a pod under the systemd cgroup driver with a
``--cgroup-root`` (README: "under any ``--cgroup-root``"). The kubelet names a pod's cgroup
with every part of its CgroupName joined by dashes (``ToSystemd``): cgroup root ``/kubelet``
gives ``/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod<uid>.slice``; the plugin's
systemd pattern must start at ``kubepods``, so such a Guaranteed pod is "an unknown cgroup
layout" and left alone. FAILS on main as of 673a7f0."""

from __future__ import annotations

import pytest

from numamem.nri import kube

UID = "6f1c2e3d-aaaa-bbbb-cccc-0123456789ab"
SYSTEMD_UID = UID.replace("-", "_")


@pytest.mark.parametrize(
    ("parent", "qos"),
    [
        (
            f"/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod{SYSTEMD_UID}.slice",
            kube.GUARANTEED,
        ),
        (
            "/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-burstable.slice/"
            f"kubelet-kubepods-burstable-pod{SYSTEMD_UID}.slice",
            kube.BURSTABLE,
        ),
    ],
)
def test_systemd_driver_under_a_cgroup_root(parent: str, qos: str) -> None:
    assert kube.qos_from_cgroup_parent(parent, UID) == qos
