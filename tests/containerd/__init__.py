"""The real containerd, driven through the CRI as the kubelet drives it (see README.md here).

Modules: :mod:`debs` (Debian packages, cached), :mod:`images` (the busybox OCI images),
:mod:`config` (containerd 1.7 / 2.x configs), :mod:`instance` (a private containerd and
its cleanup), :mod:`cri` (the CRI client; generated code in :mod:`criapi`), :mod:`kubelet`
(pods as the kubelet makes them, and their cpusets), :mod:`cgroups`, :mod:`fixtures`.
"""
