"""Pod manifests read as strictly as ``kubectl apply --validate=strict`` (issue 38): a typo'd
field is refused naming its path and the nearest known field, never "admitted, not pinned";
a manifest exactly as ``kubectl get pod -o yaml`` prints it is read as before."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from numamem.cli import podschema
from numamem.cli.main import main
from numamem.cli.podfile import PodFileError, load_pods
from numamem.testing.server import InProcessServer
from tests.daemon import REPO

KUBECTL_GET_POD = """\
apiVersion: v1
kind: Pod
metadata:
  annotations:
    kubectl.kubernetes.io/last-applied-configuration: |
      {"apiVersion":"v1","kind":"Pod","metadata":{"name":"web","namespace":"shop"}}
  creationTimestamp: "2025-11-03T09:12:44Z"
  generateName: web-7d4b9c-
  generation: 1
  labels:
    app: web
    pod-template-hash: 7d4b9c
  managedFields:
  - apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1:
      f:metadata:
        f:labels:
          .: {}
          f:app: {}
      f:spec:
        f:containers:
          k:{"name":"app"}:
            .: {}
            f:resources: {}
    manager: kube-controller-manager
    operation: Update
    time: "2025-11-03T09:12:44Z"
  - apiVersion: v1
    fieldsType: FieldsV1
    fieldsV1:
      f:status:
        f:conditions: {}
    manager: kubelet
    operation: Update
    subresource: status
    time: "2025-11-03T09:12:47Z"
  name: web-7d4b9c-x2x9q
  namespace: shop
  ownerReferences:
  - apiVersion: apps/v1
    blockOwnerDeletion: true
    controller: true
    kind: ReplicaSet
    name: web-7d4b9c
    uid: 0d3f7a52-1c1e-4bb0-9a3e-4a0c9b2f8e11
  resourceVersion: "918273"
  uid: 5b1f2e8c-6a0d-4c53-8f0e-2d9a7c1b3e44
spec:
  affinity:
    nodeAffinity:
      requiredDuringSchedulingIgnoredDuringExecution:
        nodeSelectorTerms:
        - matchExpressions:
          - key: numa
            operator: In
            values: ["2"]
  containers:
  - env:
    - name: MODE
      value: prod
    image: registry.example/web:1.4
    imagePullPolicy: IfNotPresent
    livenessProbe:
      failureThreshold: 3
      httpGet: {path: /healthz, port: 8080, scheme: HTTP}
      periodSeconds: 10
      successThreshold: 1
      timeoutSeconds: 1
    name: app
    ports:
    - containerPort: 8080
      name: http
      protocol: TCP
    resizePolicy:
    - resourceName: memory
      restartPolicy: NotRequired
    resources:
      limits: {cpu: "2", memory: 2Gi, hugepages-2Mi: 64Mi}
      requests: {cpu: "2", memory: 2Gi, hugepages-2Mi: 64Mi}
    securityContext:
      allowPrivilegeEscalation: false
      capabilities: {drop: [ALL]}
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
    volumeMounts:
    - mountPath: /var/run/secrets/kubernetes.io/serviceaccount
      name: kube-api-access-7qv2d
      readOnly: true
  dnsPolicy: ClusterFirst
  enableServiceLinks: true
  initContainers:
  - image: registry.example/proxy:2.0
    imagePullPolicy: IfNotPresent
    name: proxy
    resources:
      limits: {cpu: 500m, memory: 256Mi}
      requests: {cpu: 500m, memory: 256Mi}
    restartPolicy: Always
    terminationMessagePath: /dev/termination-log
    terminationMessagePolicy: File
  nodeName: node-17
  preemptionPolicy: PreemptLowerPriority
  priority: 0
  restartPolicy: Always
  schedulerName: default-scheduler
  securityContext: {runAsNonRoot: true}
  serviceAccount: default
  serviceAccountName: default
  terminationGracePeriodSeconds: 30
  tolerations:
  - effect: NoExecute
    key: node.kubernetes.io/not-ready
    operator: Exists
    tolerationSeconds: 300
  - effect: NoExecute
    key: node.kubernetes.io/unreachable
    operator: Exists
    tolerationSeconds: 300
  volumes:
  - name: kube-api-access-7qv2d
    projected:
      defaultMode: 420
      sources:
      - serviceAccountToken: {expirationSeconds: 3607, path: token}
      - configMap:
          items: [{key: ca.crt, path: ca.crt}]
          name: kube-root-ca.crt
status:
  conditions:
  - lastProbeTime: null
    lastTransitionTime: "2025-11-03T09:12:47Z"
    status: "True"
    type: Ready
  containerStatuses:
  - allocatedResources: {cpu: "2", memory: 2Gi}
    containerID: containerd://6c1f0a
    image: registry.example/web:1.4
    imageID: registry.example/web@sha256:00ff
    lastState: {}
    name: app
    ready: true
    resources:
      limits: {cpu: "2", memory: 2Gi}
      requests: {cpu: "2", memory: 2Gi}
    restartCount: 0
    started: true
    state:
      running: {startedAt: "2025-11-03T09:12:46Z"}
  hostIP: 10.0.4.17
  hostIPs:
  - ip: 10.0.4.17
  initContainerStatuses:
  - containerID: containerd://1a2b3c
    image: registry.example/proxy:2.0
    imageID: registry.example/proxy@sha256:11ee
    lastState: {}
    name: proxy
    ready: true
    restartCount: 0
    started: true
    state:
      running: {startedAt: "2025-11-03T09:12:45Z"}
  observedGeneration: 1
  phase: Running
  podIP: 10.244.3.9
  podIPs:
  - ip: 10.244.3.9
  qosClass: Guaranteed
  startTime: "2025-11-03T09:12:44Z"
"""
"""A pod as ``kubectl get pod -o yaml`` prints it (Kubernetes 1.33+: a Deployment's pod with a
sidecar, managedFields, probes, volumes, tolerations, status with container statuses)."""


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "pod.yaml"
    path.write_text(text)
    return str(path)


def test_a_pod_as_kubectl_prints_it_is_read(tmp_path: Path) -> None:
    [pod] = load_pods(write(tmp_path, KUBECTL_GET_POD))
    assert (pod.uid, pod.namespace, pod.name) == (
        "5b1f2e8c-6a0d-4c53-8f0e-2d9a7c1b3e44",
        "shop",
        "web-7d4b9c-x2x9q",
    )
    assert [c.name for c in pod.init_containers] == ["proxy"]
    assert pod.init_containers[0].restart_policy == "Always"
    assert dict(pod.containers[0].requests) == {
        "cpu": "2",
        "memory": "2Gi",
        "hugepages-2Mi": "64Mi",
    }
    assert pod.qos_class == "Guaranteed"


def test_a_list_as_kubectl_prints_it_is_read(tmp_path: Path) -> None:
    pod = yaml.safe_load(KUBECTL_GET_POD)
    listing = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [pod, {**pod, "metadata": {**pod["metadata"], "uid": "other"}}],
        "metadata": {"resourceVersion": ""},
    }
    pods = load_pods(write(tmp_path, yaml.safe_dump(listing)))
    assert [p.uid for p in pods] == ["5b1f2e8c-6a0d-4c53-8f0e-2d9a7c1b3e44", "other"]


@pytest.mark.parametrize("example", sorted((REPO / "examples").glob("*.yaml")), ids=str)
def test_the_examples_are_read(example: Path) -> None:
    assert load_pods(str(example))


def _typo(old: str, new: str, count: int = 1) -> str:
    assert KUBECTL_GET_POD.count(old) >= count, old
    return KUBECTL_GET_POD.replace(old, new, count)


TYPOS = [
    # (the edit, the path and the suggestion the message names)
    (("\nmetadata:\n", "\nmetdata:\n"), "metdata: unknown field of a Pod; did you mean 'metadata'?"),
    (("\nspec:\n", "\nSpec:\n"), "Spec: unknown field of a Pod; did you mean 'spec'?"),
    (("\nstatus:\n", "\nstatuses:\n"), "statuses: unknown field of a Pod; did you mean 'status'?"),
    (("  uid: 5b1f", "  uuid: 5b1f"), "metadata.uuid: unknown field of an ObjectMeta; did you mean 'uid'?"),
    (("  namespace: shop", "  namesapce: shop"), "metadata.namesapce: unknown field of an ObjectMeta; did you mean 'namespace'?"),
    (("  containers:\n  - env", "  container:\n  - env"), "spec.container: unknown field of a PodSpec; did you mean 'containers'?"),
    (("  initContainers:", "  init_containers:"), "spec.init_containers: unknown field of a PodSpec; did you mean 'initContainers'?"),
    (("    resources:\n      limits: {cpu: \"2\"", "    resource:\n      limits: {cpu: \"2\""), "spec.containers[0].resource: unknown field of a Container; did you mean 'resources'?"),
    (("    restartPolicy: Always\n    termination", "    restartpolicy: Always\n    termination"), "spec.initContainers[0].restartpolicy: unknown field of a Container; did you mean 'restartPolicy'?"),
    (("      limits: {cpu: \"2\", memory: 2Gi, huge", "      limts: {cpu: \"2\", memory: 2Gi, huge"), "spec.containers[0].resources.limts: unknown field of a ResourceRequirements; did you mean 'limits'?"),
    (("      requests: {cpu: 500m", "      request: {cpu: 500m"), "spec.initContainers[0].resources.request: unknown field of a ResourceRequirements; did you mean 'requests'?"),
    (("      limits: {cpu: 500m", "      memory: {cpu: 500m"), "spec.initContainers[0].resources.memory: unknown field of a ResourceRequirements (its fields: claims, limits, requests); numamem knows the fields of Kubernetes 1.37: if this one is from a newer Kubernetes, pass --validate=warn"),
    (("  qosClass: Guaranteed", "  qosclass: Guaranteed"), "status.qosclass: unknown field of a PodStatus; did you mean 'qosClass'?"),
    (("\n  containerStatuses:", "\n  containerStatus:"), "status.containerStatus: unknown field of a PodStatus; did you mean 'containerStatuses'?"),
]  # fmt: skip


@pytest.mark.parametrize(("edit", "message"), TYPOS, ids=[m.split(":")[0] for _, m in TYPOS])
def test_a_typo_at_each_level_names_its_path_and_the_field_meant(
    tmp_path: Path, edit: tuple[str, str], message: str
) -> None:
    path = write(tmp_path, _typo(*edit))
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert str(err.value) == f"{path}: {message}"


def test_pod_level_resources_and_status_resources_are_checked(tmp_path: Path) -> None:
    spec = yaml.safe_load(KUBECTL_GET_POD)
    spec["spec"]["resources"] = {"requets": {"memory": "4Gi"}}
    path = write(tmp_path, yaml.safe_dump(spec))
    with pytest.raises(PodFileError, match=r"spec\.resources\.requets: .*did you mean 'requests'"):
        load_pods(path)
    status = yaml.safe_load(KUBECTL_GET_POD)
    status["status"]["resources"] = {"limts": {}}
    with pytest.raises(PodFileError, match=r"status\.resources\.limts: .*'limits'"):
        load_pods(write(tmp_path, yaml.safe_dump(status)))


def test_a_typo_in_a_listed_pod_names_the_item(tmp_path: Path) -> None:
    pod = yaml.safe_load(_typo("  containers:\n  - env", "  containres:\n  - env"))
    good = yaml.safe_load(KUBECTL_GET_POD)
    listing = {"apiVersion": "v1", "kind": "List", "items": [good, pod], "metadata": {}}
    path = write(tmp_path, yaml.safe_dump(listing))
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert str(err.value) == (
        f"{path}: items[1].spec.containres: unknown field of a PodSpec; did you mean 'containers'?"
    )
    listing["metdata"] = listing.pop("metadata")
    listing["items"] = [good]
    with pytest.raises(PodFileError, match=r": metdata: unknown field of a List; did you mean"):
        load_pods(write(tmp_path, yaml.safe_dump(listing)))


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        (
            "kind: Pod\nmetadata: {uid: u}\nspec:\n  containers:\n  - name: a\n    name: b\n",
            "line 6: duplicate field 'name' (YAML would keep only the last one",
        ),
        ("kind: Pod\nmetadata: {uid: u}\nspec: {containers: {name: a}}\n", "spec.containers: expected a list of Containers"),
        ("kind: Pod\nmetadata: {uid: u}\nspec: {containers: [null]}\n", "spec.containers[0]: expected a Container (a mapping), got null"),
        ("kind: Pod\nmetadata: [u]\n", "metadata: expected an ObjectMeta (a mapping)"),
        (
            "kind: Pod\nmetadata: {uid: u}\nspec: {containers: [{name: a, resources: {requests: {memory: }}}]}\n",
            "spec.containers[0].resources.requests.memory: expected a quantity (a string such as 1Gi, or a number), got null",
        ),
        ("kind: Pod\nmetadata: {uid: [u]}\n", "metadata.uid: expected a string, got a list"),
        ("apiVersion: v2\nkind: Pod\nmetadata: {uid: u}\n", "apiVersion is 'v2', expected 'v1'"),
        ("apiVersion: apps/v1\nkind: Deployment\n", "kind is 'Deployment', expected 'Pod' or 'List'"),
        ("kind: List\nitems: [{kind: Service}]\n", "items[0].kind is 'Service', expected 'Pod'"),
        # Review of issue 38: the item was walked as a Pod first ("spec.ports: unknown field
        # of a PodSpec; did you mean 'priority'?").
        (
            "kind: List\nitems:\n- {apiVersion: v1, kind: Service, metadata: {name: s}, spec: {ports: [{port: 80}]}}\n",
            "items[0].kind is 'Service', expected 'Pod'",
        ),
        ("kind: List\nitems: [7]\n", "items[0]: expected a Pod (a mapping), got int '7'"),
        ("kind: List\nitems: {a: 1}\n", "items: expected a list of Pods"),
    ],
    ids=["duplicate", "not-a-list", "null-item", "not-a-mapping", "null-quantity", "uid-list", "api-version", "kind", "list-kind", "list-service", "list-item-int", "list-items-mapping"],
)  # fmt: skip
def test_shapes_kubectl_refuses_are_refused(tmp_path: Path, text: str, fragment: str) -> None:
    with pytest.raises(PodFileError) as err:
        load_pods(write(tmp_path, text))
    assert fragment in str(err.value)


def test_the_nearest_field() -> None:
    known = podschema.CONTAINER.fields
    assert podschema.nearest("Resources", known) == "resources"
    assert podschema.nearest("volume_mounts", known) == "volumeMounts"
    assert podschema.nearest("imagePullPolcy", known) == "imagePullPolicy"
    assert podschema.nearest("zzzz", known) is None


def test_a_key_with_control_characters_is_shown_escaped(tmp_path: Path) -> None:
    path = write(tmp_path, 'kind: Pod\nmetadata: {uid: u}\n"spec\\e[2J": {}\n')
    with pytest.raises(PodFileError) as err:
        load_pods(path)
    assert "\x1b" not in str(err.value) and "'spec\\x1b[2J': unknown field of a Pod" in str(
        err.value
    )


@pytest.mark.parametrize("command", ["admit", "explain", "hints"])
def test_a_typod_manifest_exits_1_and_admits_nothing(
    numamem_server: InProcessServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    command: str,
) -> None:
    """Issue 38: `resource:` for `resources:` was "admitted ... not pinned", exit 0."""
    path = write(
        tmp_path,
        _typo('    resources:\n      limits: {cpu: "2"', '    resource:\n      limits: {cpu: "2"'),
    )
    assert main([command, "-f", path, "--socket", numamem_server.socket]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"numamem: {path}: spec.containers[0].resource: unknown field of a Container; did you "
        "mean 'resources'?\n"
    )
    assert numamem_server.client.get_state().entries == {}


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("!!int u1", "'u1' is not a valid !!int value"),
        ("!!float u1", "'u1' is not a valid !!float value"),
        ("!!timestamp yesterday", "'yesterday' is not a valid !!timestamp value"),
    ],
)
def test_a_value_its_tag_does_not_take_is_a_manifest_error(
    numamem_server: InProcessServer,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    value: str,
    shown: str,
) -> None:
    """Review 38b: ``uid: !!int u1`` was a traceback (PyYAML's ValueError/AttributeError),
    in every --validate mode; now the manifest's refusal, exit 1 like a typo's."""
    path = tmp_path / "m.yaml"
    path.write_text(
        f"apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  uid: {value}\n"
        "spec:\n  containers: [{name: c}]\n"
    )
    for validate in ("strict", "warn", "ignore"):
        with pytest.raises(PodFileError, match=f"^{path}: at line 5: "):
            load_pods(str(path), validate)
    assert main(["explain", "-f", str(path), "--socket", numamem_server.socket]) == 1
    captured = capsys.readouterr()
    assert captured.err.startswith(f"numamem: {path}: at line 5: {shown}: give a valid one")
    assert captured.err.count("\n") == 1 and captured.out == ""


def test_warn_suggests_a_nearest_field_for_a_bounded_number_of_unknown_fields(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review 38b: difflib ran for every unknown field: a 1 MB manifest of 30,000
    20-character unknown names took 3.5 s of CPU to read with --validate=warn, 2.6 s of it
    suggesting (0.91 s now). The first MAX_SUGGESTIONS warnings of a file say the nearest
    field, the rest name the field only; names too long to reach difflib's cutoff are not
    compared at all."""
    calls: list[str] = []
    compare = podschema.difflib.get_close_matches

    def counted(word: str, *args: object, **kwargs: object) -> list[str]:
        calls.append(word)
        return compare(word, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(podschema.difflib, "get_close_matches", counted)
    many = podschema.MAX_SUGGESTIONS + 8
    keys = "".join(f"      resourcez{i:02d}: 1\n" for i in range(many))
    docs = "---\n".join(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: p\n  uid: u\n"
        f"spec:\n  containers:\n    - name: c\n{keys}"
        for _ in range(2)
    )
    path = write(tmp_path, docs)
    warned: list[str] = []
    load_pods(path, "warn", warned.append)
    assert len(warned) == 2 * many
    hinted = [w for w in warned if w.endswith("did you mean 'resources'?")]
    assert len(hinted) == podschema.MAX_SUGGESTIONS == len(calls)
    assert warned[-1].endswith("unknown field of a Container")
    long_name = "r" * 1000
    assert podschema.nearest(long_name, podschema.CONTAINER.fields) is None
    assert long_name not in calls
