"""deploy/k8s, checked offline: schema-valid, at the Pod Security level each namespace claims, closed networks.

No cluster runs where this project is developed, so these manifests are
validated, not run: against the Kubernetes API schema of one version
(``kubernetes-validate``, strict: an unknown field is an error, as a typo in a
security setting usually widens something), against the Pod Security
Standards their namespaces enforce (``scripts/pod_security.py``), and against
the rules this design adds (the engine pods' relaxations stay inside gVisor,
the networks are default-deny, no Secret value is committed). Every check has
a test that feeds it the manifest that would game it.
"""

from __future__ import annotations

import copy
import functools
import importlib.util
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any, Iterator

import pytest
import yaml

# in the test extra: a missing validator is an error, never a skipped check
from kubernetes_validate import utils as kv

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy" / "k8s"
# The Kubernetes version the manifests are written for: the schema they are validated
# against and the Pod Security policy version every namespace pins.
KUBERNETES = "1.34"

Doc = dict[str, Any]


def _load_checker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pod_security", ROOT / "scripts" / "pod_security.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["pod_security"] = module  # dataclasses resolve their module by name
    spec.loader.exec_module(module)
    return module


pss = _load_checker()


@functools.cache
def _docs() -> list[Doc]:
    return [doc for _, doc in pss.load_documents(DEPLOY)]


@pytest.fixture()
def docs() -> list[Doc]:
    """The manifests, parsed once; each test gets its own copy to game."""
    return copy.deepcopy(_docs())


def _find(docs: list[Doc], kind: str, name: str, namespace: str | None = None) -> Doc:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name
            and (namespace is None or d["metadata"].get("namespace") == namespace)]
    assert len(hits) == 1, f"expected one {kind}/{name}, found {len(hits)}"
    return hits[0]


def _pod_specs(docs: list[Doc]) -> Iterator[tuple[Doc, Doc]]:
    for doc in docs:
        for _, spec, _meta in pss.pod_templates(doc):
            yield doc, spec


def _containers(spec: Doc) -> list[Doc]:
    return [*(spec.get("initContainers") or []), *(spec.get("containers") or []), *(spec.get("ephemeralContainers") or [])]


# --- the Kubernetes schema -------------------------------------------------------------


def schema_problems(doc: Doc) -> list[str]:
    """Why ``doc`` is not a valid object of Kubernetes ``KUBERNETES`` (strict schema); empty when it is.
    A kind the schema does not know is a problem, not a pass."""
    try:
        kv.validate(doc, KUBERNETES, strict=True)
    except kv.ValidationError as exc:
        return [f"{'.'.join(str(p) for p in exc.path)}: {exc.message}"]
    except kv.SchemaNotFoundError as exc:
        return [exc.message]
    return []


def test_every_manifest_validates_against_the_kubernetes_schema(docs: list[Doc]) -> None:
    assert len(docs) >= 15
    problems = {f"{d['kind']}/{d['metadata']['name']}": schema_problems(d) for d in docs}
    assert {k: v for k, v in problems.items() if v} == {}


def test_the_schema_check_refuses_a_typo_a_wrong_type_and_an_unknown_kind(docs: list[Doc]) -> None:
    api = copy.deepcopy(_find(docs, "Deployment", "api"))
    api["spec"]["replica"] = 2  # a typo of replicas
    assert schema_problems(api)
    api = copy.deepcopy(_find(docs, "Deployment", "api"))
    api["spec"]["template"]["spec"]["containers"][0]["securityContext"]["runAsNonRoot"] = "yes"
    assert schema_problems(api)
    assert schema_problems({"apiVersion": "v1", "kind": "Sandbox", "metadata": {"name": "x"}})


def test_kustomization_lists_every_manifest_and_nothing_else() -> None:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(on_disk)


# --- Pod Security ----------------------------------------------------------------------


def test_every_pod_meets_the_level_its_namespace_enforces(docs: list[Doc]) -> None:
    assert [str(p) for p in pss.check(docs)] == []


def test_every_namespace_pins_enforce_warn_and_audit_to_the_validated_version(docs: list[Doc]) -> None:
    namespaces = [d for d in docs if d["kind"] == "Namespace"]
    assert {d["metadata"]["name"] for d in namespaces} == {"sandbox-lab", "sandbox-lab-engines"}
    for ns in namespaces:
        labels = ns["metadata"]["labels"]
        for mode in ("enforce", "warn", "audit"):
            assert labels[f"pod-security.kubernetes.io/{mode}"] in pss.LEVELS
            assert labels[f"pod-security.kubernetes.io/{mode}-version"] == f"v{KUBERNETES}"
    assert _find(docs, "Namespace", "sandbox-lab")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"


def _api_pod(docs: list[Doc]) -> tuple[list[Doc], Doc]:
    gamed = copy.deepcopy(docs)
    return gamed, _find(gamed, "Deployment", "api")["spec"]["template"]["spec"]


@pytest.mark.parametrize("sneak, expected", [
    (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    (lambda pod: pod["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
    (lambda pod: pod.update(hostNetwork=True), "hostNetwork"),
    (lambda pod: pod.update(hostPID=True), "hostPID"),
    (lambda pod: pod["containers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
    (lambda pod: pod["containers"][0]["securityContext"].pop("allowPrivilegeEscalation"), "allowPrivilegeEscalation"),
    (lambda pod: pod["securityContext"].pop("runAsNonRoot"), "runAsNonRoot"),
    (lambda pod: pod["containers"][0]["securityContext"].update(runAsUser=0), "runAsUser"),
    (lambda pod: pod["containers"][0]["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
    (lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(drop=["NET_RAW"]), "capabilities.drop"),
    (lambda pod: pod["containers"][0]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "capabilities.add"),
    (lambda pod: pod["securityContext"].pop("seccompProfile"), "seccompProfile"),
    (lambda pod: pod["containers"][0]["securityContext"].update(seccompProfile={"type": "Unconfined"}), "seccompProfile"),
    (lambda pod: pod["containers"][0]["ports"][0].update(hostPort=8000), "hostPort"),
    (lambda pod: pod["volumes"].append({"name": "nfs", "nfs": {"server": "x", "path": "/"}}), "volumes"),
    (lambda pod: pod.setdefault("initContainers", []).append(
        {"name": "sneaky", "image": "sandbox-lab/service:0.1.0", "securityContext": {"privileged": True}}), "initContainers"),
])
def test_a_pod_that_sneaks_a_privilege_into_a_restricted_namespace_fails(docs: list[Doc], sneak: Any, expected: str) -> None:
    gamed, pod = _api_pod(docs)
    sneak(pod)
    problems = [str(p) for p in pss.check(gamed)]
    assert problems and any(expected in p for p in problems), problems
    assert all("enforces restricted" in p for p in problems)


def test_baseline_refuses_host_access_and_allows_what_only_restricted_refuses(docs: list[Doc]) -> None:
    gamed, pod = _api_pod(docs)
    _find(gamed, "Namespace", "sandbox-lab")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "baseline"
    pod["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True  # restricted only
    pod["securityContext"].pop("runAsNonRoot")  # restricted only
    assert [str(p) for p in pss.check(gamed)] == []
    pod["volumes"].append({"name": "host", "hostPath": {"path": "/var/run/docker.sock"}})
    pod["containers"][0]["securityContext"]["capabilities"]["add"] = ["NET_ADMIN"]
    problems = [str(p) for p in pss.check(gamed)]
    assert any("hostPath" in p for p in problems) and any("NET_ADMIN" in p for p in problems)


def test_a_pod_in_a_namespace_without_a_level_fails_closed(docs: list[Doc]) -> None:
    gamed = copy.deepcopy(docs)
    _find(gamed, "Deployment", "api")["metadata"]["namespace"] = "default"
    assert any("not defined here" in str(p) for p in pss.check(gamed))
    gamed = copy.deepcopy(docs)
    _find(gamed, "Namespace", "sandbox-lab")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "strict"
    problems = [str(p) for p in pss.check(gamed)]
    assert any("not a Pod Security level" in p for p in problems)
    gamed = copy.deepcopy(docs)
    del _find(gamed, "Deployment", "api")["spec"]["template"]["spec"]
    assert any("no pod spec" in str(p) for p in pss.check(gamed))


def test_the_checker_runs_as_a_command_and_fails_on_a_gamed_tree(tmp_path: Path, docs: list[Doc]) -> None:
    script = str(ROOT / "scripts" / "pod_security.py")
    ok = subprocess.run([sys.executable, script, str(DEPLOY)], capture_output=True, text=True, check=False)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    gamed, pod = _api_pod(docs)
    pod["containers"][0]["securityContext"]["privileged"] = True
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(gamed))
    bad = subprocess.run([sys.executable, script, str(tmp_path)], capture_output=True, text=True, check=False)
    assert bad.returncode == 1 and "privileged" in bad.stdout


# --- the engine pods: what `privileged` enforcement does not check, the tests do -------------


def _engine(docs: list[Doc]) -> Doc:
    spec: Doc = _find(docs, "Deployment", "engine", "sandbox-lab-engines")["spec"]["template"]["spec"]
    return spec


def engine_problems(docs: list[Doc]) -> list[str]:
    """The rules the engines namespace relies on beyond its enforced level: every pod there runs under
    gVisor, none is privileged or shares a host namespace, path or port, and only the container named
    `engine` (dockerd) is relaxed: every other container meets `restricted`."""
    problems: list[str] = []
    for doc, spec in _pod_specs(docs):
        if doc["metadata"].get("namespace") != "sandbox-lab-engines":
            continue
        name = doc["metadata"]["name"]
        if spec.get("runtimeClassName") != "gvisor":
            problems.append(f"{name}: runs outside gVisor (runtimeClassName {spec.get('runtimeClassName')!r})")
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(host):
                problems.append(f"{name}: {host}")
        if any("hostPath" in v for v in spec.get("volumes") or []):
            problems.append(f"{name}: hostPath volume")
        if spec.get("automountServiceAccountToken") is not False:
            problems.append(f"{name}: mounts a service account token")
        for c in _containers(spec):
            sc = c.get("securityContext") or {}
            if sc.get("privileged"):
                problems.append(f"{name}/{c['name']}: privileged")
            if any(p.get("hostPort") for p in c.get("ports") or []):
                problems.append(f"{name}/{c['name']}: hostPort")
            if c["name"] != "engine":
                alone = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": c["name"], "namespace": "probe"},
                         "spec": {"containers": [c], "volumes": []}}
                ns = {"apiVersion": "v1", "kind": "Namespace",
                      "metadata": {"name": "probe", "labels": {pss.ENFORCE: "restricted"}}}
                problems += [f"{name}/{c['name']}: {p.message}" for p in pss.check([ns, alone])]
    return problems


def test_engine_pods_relax_only_dockerd_and_only_inside_gvisor(docs: list[Doc]) -> None:
    assert engine_problems(docs) == []
    names = [c["name"] for c in _engine(docs)["containers"]]
    assert names == ["engine", "worker-1", "worker-2"]


@pytest.mark.parametrize("sneak, expected", [
    (lambda pod: pod.pop("runtimeClassName"), "outside gVisor"),
    (lambda pod: pod["containers"][0]["securityContext"].update(privileged=True), "privileged"),
    (lambda pod: pod.update(hostNetwork=True), "hostNetwork"),
    (lambda pod: pod["volumes"].append({"name": "sock", "hostPath": {"path": "/run/containerd"}}), "hostPath"),
    (lambda pod: pod["containers"][1]["securityContext"].update(runAsUser=0), "uid 0"),
    (lambda pod: pod["containers"][2]["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]), "SYS_ADMIN"),
    (lambda pod: pod.pop("automountServiceAccountToken"), "service account"),
])
def test_a_gamed_engine_pod_fails(docs: list[Doc], sneak: Any, expected: str) -> None:
    gamed = copy.deepcopy(docs)
    sneak(_engine(gamed))
    problems = engine_problems(gamed)
    assert any(expected in p for p in problems), problems


def _alike(worker: Doc) -> Doc:
    """A worker container without what must differ between workers: its name and its liveness file."""
    alike = {k: v for k, v in worker.items() if k != "name"}
    alike["env"] = [e for e in worker["env"] if e["name"] != "SANDBOX_LAB_WORKER_ALIVE"]
    return alike


def test_workers_share_the_engine_socket_and_the_runs_directory_at_the_same_path(docs: list[Doc]) -> None:
    engine, *workers = _engine(docs)["containers"]
    first = _alike(workers[0])
    assert all(_alike(w) == first for w in workers)
    mounts = {m["name"]: m["mountPath"] for m in engine["volumeMounts"]}
    for worker in workers:
        env = {e["name"]: e.get("value") for e in worker["env"]}
        wmounts = {m["name"]: m["mountPath"] for m in worker["volumeMounts"]}
        socket = env["DOCKER_HOST"].removeprefix("unix://")
        assert env["DOCKER_HOST"].startswith("unix://")
        assert any(socket.startswith(p + "/") and wmounts.get(n) == p for n, p in mounts.items())
        # a bind source the worker names is the same file for the engine: same volume, same path
        assert wmounts["runs"] == mounts["runs"] == env["SANDBOX_LAB_RUNS"]
        assert env["SANDBOX_LAB_ENGINE_DISK"] == "local"
        assert f"--host={env['DOCKER_HOST']}" in engine["args"]  # dockerd listens where the workers look


def worker_supervision_problems(docs: list[Doc]) -> list[str]:
    """Why a dead or hung worker would not be restarted (issue 39); empty when it would be."""
    pod = _engine(docs)
    problems = [] if pod.get("restartPolicy", "Always") == "Always" else ["the pod does not restart its containers"]
    _, *workers = pod["containers"]
    files = []
    for worker in workers:
        env = {e["name"]: e.get("value") for e in worker.get("env") or []}
        mounts = {m["mountPath"] for m in worker.get("volumeMounts") or []}
        probe = worker.get("livenessProbe") or {}
        if (probe.get("exec") or {}).get("command") != ["sandbox-lab", "worker", "--alive"]:
            problems.append(f"{worker['name']}: no liveness probe asking the worker whether its loop turns")
        elif probe.get("periodSeconds", 10) * probe.get("failureThreshold", 3) < 60:
            problems.append(f"{worker['name']}: the probe gives up before the worker's own 60 s")
        alive = env.get("SANDBOX_LAB_WORKER_ALIVE") or ""
        if not any(alive.startswith(m + "/") for m in mounts):  # the root filesystem is read-only
            problems.append(f"{worker['name']}: its liveness file is not on a writable mount")
        files.append(alive)
    if len(set(files)) != len(files):
        problems.append("two workers share a liveness file: one's turns would keep the other's probe passing")
    return problems


def test_a_dead_or_hung_worker_is_restarted(docs: list[Doc]) -> None:
    assert worker_supervision_problems(docs) == []


@pytest.mark.parametrize("sneak, expected", [
    (lambda pod: pod.update(restartPolicy="Never"), "does not restart"),
    (lambda pod: pod["containers"][1].pop("livenessProbe"), "no liveness probe"),
    (lambda pod: pod["containers"][2]["livenessProbe"].update(failureThreshold=1), "gives up"),
    (lambda pod: pod["containers"][2]["env"][0].update(value="/tmp/worker-1.alive"), "share a liveness file"),
    (lambda pod: pod["containers"][1]["env"][0].update(value="/var/worker.alive"), "writable mount"),
])
def test_a_gamed_worker_supervision_fails(docs: list[Doc], sneak: Any, expected: str) -> None:
    gamed = copy.deepcopy(docs)
    sneak(_engine(gamed))
    problems = worker_supervision_problems(gamed)
    assert any(expected in p for p in problems), problems


def test_the_runtimeclass_is_gvisor_on_its_own_tainted_pool(docs: list[Doc]) -> None:
    rc = _find(docs, "RuntimeClass", "gvisor")
    assert rc["handler"] == "runsc"
    assert rc["scheduling"]["nodeSelector"] == {"sandbox-lab.org/gvisor": "true"}
    assert rc["scheduling"]["tolerations"][0]["effect"] == "NoSchedule"


# --- resources, images, owners, secrets -------------------------------------------------------


def limit_problems(docs: list[Doc]) -> list[str]:
    """Every container has CPU and memory requests and limits: no pod may starve its node."""
    problems = []
    for doc, spec in _pod_specs(docs):
        for c in _containers(spec):
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                for what in ("cpu", "memory"):
                    if what not in (res.get(part) or {}):
                        problems.append(f"{doc['metadata']['name']}/{c['name']}: no {part}.{what}")
    return problems


def test_every_container_has_requests_and_limits(docs: list[Doc]) -> None:
    assert limit_problems(docs) == []
    gamed = copy.deepcopy(docs)
    del _engine(gamed)["containers"][2]["resources"]["limits"]["memory"]
    assert limit_problems(gamed) == ["engine/worker-2: no limits.memory"]


def _version() -> str:
    version: str = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    return version


def image_problems(docs: list[Doc]) -> list[str]:
    """Images are the two this repository documents (README, "Images"), tagged with the package's
    version: `sandbox-lab/service` (API, worker, Redis) and `sandbox-lab/engine` (dockerd, runsc and the
    images `make images` builds); never `latest`, never another name a registry could serve anything under."""
    allowed = re.compile(rf"sandbox-lab/(service|engine):{re.escape(_version())}")
    return [f"{doc['metadata']['name']}/{c['name']}: {c.get('image')!r}"
            for doc, spec in _pod_specs(docs) for c in _containers(spec)
            if not allowed.fullmatch(str(c.get("image")))]


def test_images_are_the_documented_ones_at_the_package_version(docs: list[Doc]) -> None:
    assert image_problems(docs) == []
    readme = (DEPLOY / "README.md").read_text()
    for name in ("sandbox-lab/service", "sandbox-lab/engine", "sandbox-lab/sandbox", "sandbox-lab/services"):
        assert f"`{name}" in readme
    for image in ("redis:7", f"sandbox-lab/service:latest", f"docker.io/sandbox-lab/service:{_version()}"):
        gamed = copy.deepcopy(docs)
        _find(gamed, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]["image"] = image
        assert image_problems(gamed) == [f"redis/redis: {image!r}"]


def test_the_engine_carries_the_images_make_images_builds() -> None:
    # the names the backend builds and runs (grader.backends.docker.images); the engine image preloads them
    from grader.backends.docker.images import image_specs
    readme = (DEPLOY / "README.md").read_text()
    for spec in image_specs().values():
        assert f"`{spec.repository}" in readme


CLUSTER_SCOPED = {"Namespace", "RuntimeClass", "ClusterRole", "ClusterRoleBinding", "PersistentVolume",
                  "StorageClass", "PriorityClass", "CustomResourceDefinition", "Node"}


def owner_problems(docs: list[Doc]) -> list[str]:
    """Kubernetes' garbage collector honours an owner only in the dependent's own namespace (or a
    cluster-scoped one for a namespaced dependent; a cluster-scoped dependent only a cluster-scoped
    owner); anything else is treated as an unresolvable owner. So no such reference may be written."""
    scope = {(d["kind"], d["metadata"]["name"]): d["metadata"].get("namespace") for d in docs}
    problems = []
    for doc in docs:
        ns = doc["metadata"].get("namespace")
        for ref in doc["metadata"].get("ownerReferences") or []:
            key = (ref.get("kind"), ref.get("name"))
            owner_cluster = ref.get("kind") in CLUSTER_SCOPED
            where = f"{doc['kind']}/{doc['metadata']['name']}"
            if key not in scope and not owner_cluster:
                problems.append(f"{where}: owner {key} is not defined here")
            elif ns is None and not owner_cluster:
                problems.append(f"{where}: a cluster-scoped object cannot be owned by a namespaced {ref.get('kind')}")
            elif ns is not None and not owner_cluster and scope.get(key) != ns:
                problems.append(f"{where}: owner {key} is in namespace {scope.get(key)!r}, not {ns!r}")
    return problems


def test_no_owner_reference_crosses_a_namespace(docs: list[Doc]) -> None:
    assert owner_problems(docs) == []
    gamed = copy.deepcopy(docs)
    ref = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "engine", "uid": "0"}
    _find(gamed, "Secret", "sandbox-lab-tokens")["metadata"]["ownerReferences"] = [ref]
    assert owner_problems(gamed) == [
        "Secret/sandbox-lab-tokens: owner ('Deployment', 'engine') is in namespace 'sandbox-lab-engines', not 'sandbox-lab'"]
    gamed = copy.deepcopy(docs)
    _find(gamed, "RuntimeClass", "gvisor")["metadata"]["ownerReferences"] = [{**ref, "kind": "Deployment", "name": "api"}]
    assert "cannot be owned" in owner_problems(gamed)[0]
    gamed = copy.deepcopy(docs)
    _find(gamed, "Service", "api")["metadata"]["ownerReferences"] = [{**ref, "kind": "Namespace", "name": "sandbox-lab"}]
    assert owner_problems(gamed) == []  # a cluster-scoped owner of a namespaced object is allowed


def secret_problems(docs: list[Doc]) -> list[str]:
    return [f"{d['metadata']['namespace']}/{d['metadata']['name']}" for d in docs
            if d["kind"] == "Secret" and (d.get("data") or d.get("stringData"))]


def test_no_secret_value_is_committed(docs: list[Doc]) -> None:
    assert secret_problems(docs) == []
    names = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Secret"}
    assert names == {("sandbox-lab", "sandbox-lab-tokens"), ("sandbox-lab", "redis-auth"), ("sandbox-lab-engines", "redis-auth")}
    gamed = copy.deepcopy(docs)
    _find(gamed, "Secret", "redis-auth", "sandbox-lab")["stringData"] = {"password": "hunter2"}
    assert secret_problems(gamed) == ["sandbox-lab/redis-auth"]


def test_every_secret_a_pod_names_is_defined_in_its_namespace(docs: list[Doc]) -> None:
    secrets = {(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Secret"}
    for doc, spec in _pod_specs(docs):
        ns = doc["metadata"]["namespace"]
        named = {v["secret"]["secretName"] for v in spec.get("volumes") or [] if "secret" in v}
        named |= {e["valueFrom"]["secretKeyRef"]["name"] for c in _containers(spec) for e in c.get("env") or []
                  if "secretKeyRef" in (e.get("valueFrom") or {})}
        assert {(ns, n) for n in named} <= secrets, (doc["metadata"]["name"], named)


# --- the workloads ---------------------------------------------------------------------------


def test_the_api_is_probed_on_healthz_and_kept_up_by_its_budget(docs: list[Doc]) -> None:
    api = _find(docs, "Deployment", "api")
    container = api["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["sandbox-lab", "serve"]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "http"}
    pdb = _find(docs, "PodDisruptionBudget", "api")
    assert pdb["spec"]["selector"]["matchLabels"] == api["spec"]["selector"]["matchLabels"]
    assert 0 < pdb["spec"]["minAvailable"] < api["spec"]["replicas"]
    service = _find(docs, "Service", "api")
    assert service["spec"]["selector"].items() <= api["spec"]["template"]["metadata"]["labels"].items()


def _redis_script(docs: list[Doc]) -> str:
    script: str = _find(docs, "StatefulSet", "redis")["spec"]["template"]["spec"]["containers"][0]["args"][0]
    return script


def test_redis_persists_its_queue_on_a_volume_and_never_evicts(docs: list[Doc]) -> None:
    redis = _find(docs, "StatefulSet", "redis")
    script = _redis_script(docs)
    assert "--appendonly yes" in script and "--dir /data" in script and "--maxmemory-policy noeviction" in script
    mounts = {m["name"]: m["mountPath"] for m in redis["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]}
    claims = [t["metadata"]["name"] for t in redis["spec"]["volumeClaimTemplates"]]
    assert mounts["data"] == "/data" and claims == ["data"]


def _run_redis_script(docs: list[Doc], tmp_path: Path, password: str) -> subprocess.CompletedProcess[str]:
    """The Redis container's start script, with a stand-in redis-server that prints its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    fake = bin_dir / "redis-server"
    fake.write_text('#!/bin/sh\necho "redis-server $*"\ncat "$1"\n')
    fake.chmod(0o755)
    script = _redis_script(docs).replace("/run/redis/", f"{tmp_path}/")
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "REDIS_PASSWORD": password}
    return subprocess.run(["/bin/sh", "-c", script], capture_output=True, text=True, env=env, check=False)


def test_redis_refuses_to_start_without_a_password(docs: list[Doc], tmp_path: Path) -> None:
    empty = _run_redis_script(docs, tmp_path, "")
    assert empty.returncode == 1 and "refusing to start an open Redis" in empty.stderr
    assert "redis-server" not in empty.stdout
    ok = _run_redis_script(docs, tmp_path, "s3cret")
    assert ok.returncode == 0, ok.stderr
    assert "requirepass s3cret" in ok.stdout  # from the file ...
    assert "s3cret" not in ok.stdout.splitlines()[0]  # ... never on the command line


# --- the networks ------------------------------------------------------------------------------


def _policies(docs: list[Doc]) -> list[Doc]:
    return [d for d in docs if d["kind"] == "NetworkPolicy"]


def network_problems(docs: list[Doc]) -> list[str]:
    """Every namespace that runs pods starts from default-deny in both directions; no rule opens an
    address block or "anywhere" (a rule without `to`/`from`, or an empty peer); every pod is selected."""
    problems = []
    namespaces = {doc["metadata"]["namespace"] for doc, _ in _pod_specs(docs)}
    for ns in sorted(namespaces):
        denies = [p for p in _policies(docs) if p["metadata"]["namespace"] == ns and p["spec"]["podSelector"] == {}
                  and set(p["spec"].get("policyTypes") or []) == {"Ingress", "Egress"}
                  and not p["spec"].get("ingress") and not p["spec"].get("egress")]
        if not denies:
            problems.append(f"{ns}: no default-deny policy for ingress and egress")
    for policy in _policies(docs):
        name = f"{policy['metadata']['namespace']}/{policy['metadata']['name']}"
        for direction, side in (("ingress", "from"), ("egress", "to")):
            for i, rule in enumerate(policy["spec"].get(direction) or []):
                peers = rule.get(side)
                if not peers:
                    problems.append(f"{name}: {direction}[{i}] has no `{side}`: it admits everything")
                for peer in peers or []:
                    if "ipBlock" in peer:
                        problems.append(f"{name}: {direction}[{i}] opens an ipBlock")
                    if not peer or all(v == {} for v in peer.values()):
                        problems.append(f"{name}: {direction}[{i}] has an empty peer: it admits everything")
                if not rule.get("ports"):
                    problems.append(f"{name}: {direction}[{i}] opens every port")
    return problems


def _egress_of(docs: list[Doc], namespace: str, labels: dict[str, str]) -> set[tuple[str, str, int]]:
    """(namespace, app label or k8s-app, port) of every peer the policies let pods with ``labels`` reach."""
    reach = set()
    for policy in _policies(docs):
        selector = policy["spec"]["podSelector"].get("matchLabels") or {}
        if policy["metadata"]["namespace"] != namespace or not selector.items() <= labels.items():
            continue
        for rule in policy["spec"].get("egress") or []:
            for peer in rule["to"]:
                ns = (peer.get("namespaceSelector") or {}).get("matchLabels", {}).get("kubernetes.io/metadata.name", namespace)
                pods = (peer.get("podSelector") or {}).get("matchLabels", {})
                app = pods.get("app.kubernetes.io/name") or pods.get("k8s-app") or "?"
                reach |= {(ns, app, port["port"]) for port in rule["ports"]}
    return reach


DNS = {("kube-system", "kube-dns", 53)}


def test_the_networks_are_default_deny_and_closed(docs: list[Doc]) -> None:
    assert network_problems(docs) == []
    engine_labels = _engine_labels(docs)
    # the engine pods, and so every sandbox inside them, reach Redis and DNS, nothing else
    assert _egress_of(docs, "sandbox-lab-engines", engine_labels) == {("sandbox-lab", "redis", 6379)} | DNS
    assert _egress_of(docs, "sandbox-lab", {"app.kubernetes.io/name": "api"}) == {("sandbox-lab", "redis", 6379)} | DNS
    assert _egress_of(docs, "sandbox-lab", {"app.kubernetes.io/name": "redis"}) == set()
    engine_policy = _find(docs, "NetworkPolicy", "engine", "sandbox-lab-engines")
    assert engine_policy["spec"]["ingress"] == [] and "Ingress" in engine_policy["spec"]["policyTypes"]


def _engine_labels(docs: list[Doc]) -> dict[str, str]:
    labels: dict[str, str] = _find(docs, "Deployment", "engine")["spec"]["template"]["metadata"]["labels"]
    return labels


def test_redis_admits_the_api_and_the_workers_only(docs: list[Doc]) -> None:
    rule, = _find(docs, "NetworkPolicy", "redis")["spec"]["ingress"]
    admitted = {((p.get("namespaceSelector") or {}).get("matchLabels", {}).get("kubernetes.io/metadata.name", "sandbox-lab"),
                 p["podSelector"]["matchLabels"]["app.kubernetes.io/name"]) for p in rule["from"]}
    assert admitted == {("sandbox-lab", "api"), ("sandbox-lab-engines", "engine")}
    assert _engine_labels(docs)["app.kubernetes.io/name"] == "engine"


@pytest.mark.parametrize("sneak, expected", [
    (lambda p: p["spec"]["egress"].append({}), "has no `to`"),
    (lambda p: p["spec"]["egress"].append({"to": [{"ipBlock": {"cidr": "0.0.0.0/0"}}], "ports": [{"port": 443}]}), "ipBlock"),
    (lambda p: p["spec"]["egress"].append({"to": [{"namespaceSelector": {}}], "ports": [{"port": 443}]}), "empty peer"),
    (lambda p: p["spec"]["egress"][0].pop("ports"), "every port"),
])
def test_a_gamed_network_policy_fails(docs: list[Doc], sneak: Any, expected: str) -> None:
    gamed = copy.deepcopy(docs)
    sneak(_find(gamed, "NetworkPolicy", "engine", "sandbox-lab-engines"))
    assert any(expected in p for p in network_problems(gamed)), network_problems(gamed)


def test_a_namespace_without_default_deny_fails(docs: list[Doc]) -> None:
    gamed = [d for d in copy.deepcopy(docs)
             if not (d["kind"] == "NetworkPolicy" and d["metadata"]["name"] == "default-deny"
                     and d["metadata"]["namespace"] == "sandbox-lab-engines")]
    assert network_problems(gamed) == ["sandbox-lab-engines: no default-deny policy for ingress and egress"]


# --- JupyterHub ---------------------------------------------------------------------------------


def _values() -> Doc:
    values: Doc = yaml.safe_load((DEPLOY / "jupyterhub" / "values.yaml").read_text())
    return values


def test_jupyterhub_points_user_servers_at_the_api_service(docs: list[Doc]) -> None:
    values = _values()
    env = values["singleuser"]["extraEnv"]
    service = _find(docs, "Service", "api")
    port = service["spec"]["ports"][0]["port"]
    host = f"{service['metadata']['name']}.{service['metadata']['namespace']}.svc.cluster.local"
    assert env["SANDBOX_LAB_BACKEND"] == "remote"
    assert env["SANDBOX_LAB_SERVICE_URL"] == (f"http://{host}" if port == 80 else f"http://{host}:{port}")
    assert "SANDBOX_LAB_TOKEN" not in env  # per user, from the hook below, never one shared token
    # the chart's egress rule opens the API's pods on the container's port (what NetworkPolicy sees after DNAT)
    rule, = values["singleuser"]["networkPolicy"]["egress"]
    api = _find(docs, "Deployment", "api")["spec"]["template"]
    assert rule["to"][0]["podSelector"]["matchLabels"].items() <= api["metadata"]["labels"].items()
    assert rule["to"][0]["namespaceSelector"]["matchLabels"] == {"kubernetes.io/metadata.name": "sandbox-lab"}
    assert rule["ports"] == [{"port": api["spec"]["containers"][0]["ports"][0]["containerPort"], "protocol": "TCP"}]
    # ... and the API admits the user servers of the namespace the snippet installs into
    ingress = _find(docs, "NetworkPolicy", "api")["spec"]["ingress"][0]["from"][0]
    assert ingress["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"] == "jhub"
    assert "--namespace jhub" in (DEPLOY / "jupyterhub" / "values.yaml").read_text()


def test_the_jupyterhub_snippet_is_made_of_valid_kubernetes_parts() -> None:
    """The chart copies the egress rule into a NetworkPolicy and the hook's variable into the pod: both must
    be valid there, so they are validated inside the objects they end up in."""
    values = _values()
    policy = {"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
              "metadata": {"name": "singleuser", "namespace": "jhub"},
              "spec": {"podSelector": {"matchLabels": {"component": "singleuser-server"}},
                       "policyTypes": ["Egress"], "egress": values["singleuser"]["networkPolicy"]["egress"]}}
    assert schema_problems(policy) == []
    spawner = _spawner("alice")
    _token_hook()(spawner)
    env = [{"name": k, "value": v} for k, v in values["singleuser"]["extraEnv"].items()]
    env += [{"name": k, **v} for k, v in spawner.environment.items()]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "jupyter-alice", "namespace": "jhub"},
           "spec": {"containers": [{"name": "notebook", "image": "lab", "env": env}]}}
    assert schema_problems(pod) == []
    pod["spec"]["containers"][0]["env"][-1]["valueFrom"]["secretKeyRef"]["keys"] = "alice"  # a typo is caught
    assert schema_problems(pod)


def _token_hook() -> Any:
    code = _values()["hub"]["extraConfig"]["sandbox-lab-token"]
    c = SimpleNamespace(KubeSpawner=SimpleNamespace())
    exec(compile(code, "values.yaml:hub.extraConfig", "exec"), {"c": c})
    return c.KubeSpawner.pre_spawn_hook


def _spawner(name: str) -> Any:
    warnings: list[str] = []
    log = SimpleNamespace(warning=lambda msg, *args: warnings.append(msg % args))
    return SimpleNamespace(user=SimpleNamespace(name=name), environment={}, log=log, warnings=warnings)


def test_each_learner_server_gets_its_own_token_by_reference() -> None:
    hook = _token_hook()
    alice = _spawner("alice")
    hook(alice)
    assert alice.environment == {"SANDBOX_LAB_TOKEN": {"valueFrom": {"secretKeyRef": {
        "name": "sandbox-lab-user-tokens", "key": "alice", "optional": True}}}}
    bob = _spawner("bob")
    hook(bob)
    assert bob.environment["SANDBOX_LAB_TOKEN"]["valueFrom"]["secretKeyRef"]["key"] == "bob"
    # a name that cannot be a Secret key (or could select another's) gets no token, and a warning
    for odd in ("alice/../bob", "eve@example.org", ""):
        spawner = _spawner(odd)
        hook(spawner)
        assert spawner.environment == {} and spawner.warnings


def test_the_scaling_note_points_at_the_manifests_and_claims_no_more_than_validation() -> None:
    # docs/scaling.md holds what was measured; what is designed, the manifests included, is docs/scaling-design.md
    assert "(scaling-design.md)" in (ROOT / "docs" / "scaling.md").read_text()
    note = (ROOT / "docs" / "scaling-design.md").read_text()
    assert "`deploy/k8s/`" in note and "`tests/unit/project/test_deploy_k8s.py`" in note and "scripts/pod_security.py" in note
    assert "none of it is code" not in note
    assert "validated and not run" in note and "Nothing here has run on one" in note
    assert "Status: validated, not run." in (DEPLOY / "README.md").read_text()
