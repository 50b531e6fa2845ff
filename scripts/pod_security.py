#!/usr/bin/env python3
"""Pod Security Standards, checked offline: does every pod template meet the level its namespace enforces?

Kubernetes' Pod Security Admission refuses a pod whose namespace label
``pod-security.kubernetes.io/enforce`` names a level the pod does not meet.
No cluster runs where this project is developed, so this module applies the
same rules to the manifests in ``deploy/k8s/`` before any cluster sees them:
a manifest that claims ``restricted`` and sneaks in ``privileged: true`` or a
``hostPath`` fails here, in the unit tests, instead of at ``kubectl apply``.

The rules are the controls of the Pod Security Standards (baseline and
restricted, the policy version the namespaces pin) that a pod template can
break. Fail closed: a pod in a namespace the manifests do not define, a
namespace without an enforce label, or an unknown level is a problem, never
a pass.

Usage: ``python scripts/pod_security.py deploy/k8s`` prints each problem and
exits 1 when there is one. Imports PyYAML only (a test dependency already).
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # no stubs in the test environment; only safe_load_all is used

__all__ = ["LEVELS", "Problem", "check", "load_documents", "main", "pod_templates"]

LEVELS = ("privileged", "baseline", "restricted")
ENFORCE = "pod-security.kubernetes.io/enforce"

# baseline: capabilities a container may add (the container runtimes' default set)
_BASELINE_CAPS = frozenset({
    "AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD", "NET_BIND_SERVICE",
    "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT",
})
# baseline: the namespaced sysctls the standard calls safe
_SAFE_SYSCTLS = frozenset({
    "kernel.shm_rmid_forced", "net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies", "net.ipv4.ping_group_range", "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time", "net.ipv4.tcp_fin_timeout", "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
})
_SELINUX_TYPES = frozenset({"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"})
# restricted: the only volume types a pod may use
_RESTRICTED_VOLUMES = frozenset({
    "configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim", "projected", "secret",
})
_VOLUME_META = frozenset({"name"})

# where each workload kind keeps its pod template
_TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "ReplicationController": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
}


@dataclass(frozen=True)
class Problem:
    """One way one object breaks the level its namespace enforces (or cannot be checked)."""

    where: str  # Kind/namespace/name
    path: str  # the field, e.g. spec.template.spec.containers[0].securityContext.privileged
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.path}: {self.message}"


def load_documents(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every Kubernetes object in the ``*.yaml`` files of ``root`` (its kustomization left out; subfolders
    hold other tools' files, e.g. ``jupyterhub/``'s Helm values, and are not read)."""
    found: list[tuple[Path, dict[str, Any]]] = []
    for path in sorted(root.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if doc is None:
                continue
            if not isinstance(doc, dict) or "kind" not in doc or "apiVersion" not in doc:
                raise ValueError(f"{path}: a document that is not a Kubernetes object (no kind/apiVersion)")
            found.append((path, doc))
    return found


def _name(doc: Mapping[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    return f"{doc.get('kind')}/{meta.get('namespace', '-')}/{meta.get('name', '?')}"


def pod_templates(doc: Mapping[str, Any]) -> Iterator[tuple[str, dict[str, Any], dict[str, Any]]]:
    """The pod of a workload: (the path to its spec, its spec, its metadata); nothing for a kind that holds no pod.

    A workload without a pod spec is not "no pod": it cannot be checked, so its spec comes back empty
    and ``check`` reports it."""
    kind = doc.get("kind")
    if kind not in _TEMPLATE_PATHS:
        return
    node: Any = doc
    for key in _TEMPLATE_PATHS[str(kind)]:
        node = node.get(key) if isinstance(node, dict) else None
    template: dict[str, Any] = node if isinstance(node, dict) else {}
    spec = template.get("spec")
    meta = template.get("metadata")
    prefix = ".".join((*_TEMPLATE_PATHS[str(kind)], "spec"))
    yield prefix, spec if isinstance(spec, dict) else {}, meta if isinstance(meta, dict) else {}


def _containers(spec: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, dict[str, Any]]]:
    for field in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(field) or []):
            yield f"{prefix}.{field}[{i}]", c


def _baseline(spec: Mapping[str, Any], prefix: str, meta: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    for host in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(host):
            yield f"{prefix}.{host}", "host namespaces are not allowed (baseline)"
    psc = spec.get("securityContext") or {}
    yield from _security_baseline(psc, f"{prefix}.securityContext")
    for i, sysctl in enumerate(psc.get("sysctls") or []):
        if sysctl.get("name") not in _SAFE_SYSCTLS:
            yield f"{prefix}.securityContext.sysctls[{i}]", f"sysctl {sysctl.get('name')!r} is not in the safe set (baseline)"
    for i, vol in enumerate(spec.get("volumes") or []):
        if "hostPath" in vol:
            yield f"{prefix}.volumes[{i}].hostPath", "hostPath volumes are not allowed (baseline)"
    for key, value in (meta.get("annotations") or {}).items():
        if key.startswith("container.apparmor.security.beta.kubernetes.io/") and not (
            value == "runtime/default" or str(value).startswith("localhost/")
        ):
            yield f"metadata.annotations[{key}]", f"AppArmor profile {value!r} is not allowed (baseline)"
    for where, c in _containers(spec, prefix):
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            yield f"{where}.securityContext.privileged", "privileged containers are not allowed (baseline)"
        added = (sc.get("capabilities") or {}).get("add") or []
        extra = sorted(set(added) - _BASELINE_CAPS)
        if extra:
            yield f"{where}.securityContext.capabilities.add", f"adds {', '.join(extra)} (baseline allows only the runtime's default set)"
        for j, port in enumerate(c.get("ports") or []):
            if port.get("hostPort"):
                yield f"{where}.ports[{j}].hostPort", "host ports are not allowed (baseline)"
        if sc.get("procMount", "Default") != "Default":
            yield f"{where}.securityContext.procMount", "only the Default proc mount is allowed (baseline)"
        yield from _security_baseline(sc, f"{where}.securityContext")


def _security_baseline(sc: Mapping[str, Any], where: str) -> Iterator[tuple[str, str]]:
    """The controls a pod's and a container's securityContext share."""
    if (sc.get("windowsOptions") or {}).get("hostProcess"):
        yield f"{where}.windowsOptions.hostProcess", "Windows host processes are not allowed (baseline)"
    if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        yield f"{where}.seccompProfile.type", "Unconfined seccomp is not allowed (baseline)"
    if (sc.get("appArmorProfile") or {}).get("type") == "Unconfined":
        yield f"{where}.appArmorProfile.type", "Unconfined AppArmor is not allowed (baseline)"
    selinux = sc.get("seLinuxOptions") or {}
    if selinux.get("type", "") not in _SELINUX_TYPES:
        yield f"{where}.seLinuxOptions.type", f"SELinux type {selinux.get('type')!r} is not allowed (baseline)"
    for key in ("user", "role"):
        if selinux.get(key):
            yield f"{where}.seLinuxOptions.{key}", f"a custom SELinux {key} is not allowed (baseline)"


def _restricted(spec: Mapping[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
    psc = spec.get("securityContext") or {}
    for i, vol in enumerate(spec.get("volumes") or []):
        kinds = set(vol) - _VOLUME_META
        bad = sorted(kinds - _RESTRICTED_VOLUMES)
        if bad:
            yield f"{prefix}.volumes[{i}]", f"volume type {', '.join(bad)} is not allowed (restricted)"
    if psc.get("runAsUser") == 0:
        yield f"{prefix}.securityContext.runAsUser", "uid 0 is not allowed (restricted)"
    pod_nonroot = psc.get("runAsNonRoot") is True
    pod_seccomp = (psc.get("seccompProfile") or {}).get("type") in ("RuntimeDefault", "Localhost")
    for where, c in _containers(spec, prefix):
        sc = c.get("securityContext") or {}
        if sc.get("allowPrivilegeEscalation") is not False:
            yield f"{where}.securityContext.allowPrivilegeEscalation", "must be set to false (restricted)"
        nonroot = sc.get("runAsNonRoot")
        if nonroot is False or (nonroot is None and not pod_nonroot):
            yield f"{where}.securityContext.runAsNonRoot", "must be true, on the pod or the container (restricted)"
        if sc.get("runAsUser") == 0:
            yield f"{where}.securityContext.runAsUser", "uid 0 is not allowed (restricted)"
        seccomp = (sc.get("seccompProfile") or {}).get("type")
        if (seccomp is None and not pod_seccomp) or seccomp not in (None, "RuntimeDefault", "Localhost"):
            yield f"{where}.securityContext.seccompProfile.type", "must be RuntimeDefault or Localhost, on the pod or the container (restricted)"
        caps = sc.get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []):
            yield f"{where}.securityContext.capabilities.drop", "must drop ALL (restricted)"
        added = sorted(set(caps.get("add") or []) - {"NET_BIND_SERVICE"})
        if added:
            yield f"{where}.securityContext.capabilities.add", f"adds {', '.join(added)} (restricted allows only NET_BIND_SERVICE)"


def check(documents: Iterable[Mapping[str, Any]]) -> list[Problem]:
    """Every way a pod template breaks the level its namespace enforces; empty when all meet it."""
    docs = list(documents)
    levels: dict[str, str] = {}
    problems: list[Problem] = []
    for doc in docs:
        if doc.get("kind") != "Namespace":
            continue
        meta = doc.get("metadata") or {}
        level = (meta.get("labels") or {}).get(ENFORCE)
        if level not in LEVELS:
            problems.append(Problem(_name(doc), f"metadata.labels[{ENFORCE}]",
                                    f"{level!r} is not a Pod Security level; set one of {', '.join(LEVELS)}"))
            continue
        levels[str(meta.get("name"))] = str(level)
    for doc in docs:
        for prefix, spec, template_meta in pod_templates(doc):
            where = _name(doc)
            if not spec:
                problems.append(Problem(where, prefix, "no pod spec to check"))
                continue
            namespace = (doc.get("metadata") or {}).get("namespace")
            level = levels.get(str(namespace)) if namespace else None
            if level is None:
                problems.append(Problem(where, "metadata.namespace",
                                        f"namespace {namespace!r} is not defined here with an enforce label: nothing says which level applies"))
                continue
            found: list[tuple[str, str]] = []
            if level in ("baseline", "restricted"):
                found += _baseline(spec, prefix, template_meta)
            if level == "restricted":
                found += _restricted(spec, prefix)
            problems += [Problem(where, path, f"{message}; namespace {namespace} enforces {level}")
                         for path, message in found]
    return problems


def main(argv: list[str]) -> int:
    root = Path(argv[1]) if len(argv) > 1 else Path("deploy/k8s")
    problems = check(doc for _, doc in load_documents(root))
    for problem in problems:
        print(problem)
    if not problems:
        print(f"{root}: every pod template meets the Pod Security level its namespace enforces")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
