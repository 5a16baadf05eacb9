"""deploy/: every manifest, job file, script and the Dockerfile checked statically, and the plain
recipe (and the sbatch script, with a stand-in for srun) run end to end on 127.0.0.1."""

import copy
import importlib.resources
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from functools import cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pandas as pd
import pytest
import referencing
import yaml

from microagg.jobs.cluster import ALLOCATOR_THRESHOLDS, PEER_CONNECT_TIMEOUT

from conftest import CENSUS_CSV, ROOT, assert_k_anonymous, cluster_address, stop_processes

DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent
DASK = BIN / "dask"
MICROAGG = BIN / "microagg"
JOB_PATH = "/etc/microagg/job.toml"
K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


# --- helpers -------------------------------------------------------------------------------------------

def files(*patterns):
    found = sorted({p for pattern in patterns for p in DEPLOY.rglob(pattern)})
    assert found, f"no {patterns} under deploy/"
    return found


def rel(path):
    return str(path.relative_to(ROOT))


@cache
def documents():
    """``(file, document)`` of every YAML document under deploy/."""
    out = []
    for path in files("*.yaml", "*.yml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                out.append((rel(path), doc))
    return out


def objects(kind):
    return [(f, d) for f, d in documents() if d.get("kind") == kind]


def clusters():
    """``(where, cluster name, DaskCluster spec)``: every DaskCluster and every DaskJob's cluster (the
    operator names a DaskJob's cluster after the DaskJob)."""
    out = [(f"{f} DaskCluster", d["metadata"]["name"], d["spec"]) for f, d in objects("DaskCluster")]
    out += [(f"{f} DaskJob", d["metadata"]["name"], d["spec"]["cluster"]["spec"]) for f, d in objects("DaskJob")]
    return out


def pod_specs():
    """``(where, role, PodSpec)`` of every pod the manifests describe."""
    out = []
    for where, _, spec in clusters():
        out += [(where, "scheduler", spec["scheduler"]["spec"]), (where, "worker", spec["worker"]["spec"])]
    for f, d in objects("DaskJob"):
        out.append((f"{f} DaskJob", "job", d["spec"]["job"]["spec"]))
    for f, d in objects("CronJob"):
        out.append((f"{f} CronJob", "job", d["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    for f, d in objects("Job"):
        out.append((f"{f} Job", "job", d["spec"]["template"]["spec"]))
    return out


def containers(pod):
    return [*pod.get("initContainers", []), *pod["containers"]]


def quantity(text):
    """Bytes of a Kubernetes memory quantity ("16Gi", "500M") or a Dask size ("14GiB")."""
    from dask.utils import parse_bytes

    text = str(text)
    return parse_bytes(text + "B" if re.fullmatch(r"[\d.]+[KMGTPE]i", text) else text)


def arg_after(args, flag):
    assert flag in args, f"{flag} missing in {args}"
    return args[args.index(flag) + 1]


def job_files():
    """``(where, text)`` of every job file: the TOML files under deploy/ and those in ConfigMaps."""
    out = [(rel(p), p.read_text()) for p in files("*.toml")]
    for f, d in objects("ConfigMap"):
        out += [(f"{f} {d['metadata']['name']}/{key}", text) for key, text in d.get("data", {}).items()
                if key.endswith(".toml")]
    return out


@cache
def microagg_commands():
    proc = subprocess.run([str(MICROAGG), "--help"], capture_output=True, text=True, timeout=60)
    return proc.stdout


def needs_command(name):
    if not re.search(rf"^\s+{name}\s", microagg_commands(), re.M):
        pytest.skip(f"`microagg {name}` does not exist yet (not in `microagg --help`)")


def mounted_job_files(pod):
    """``(ConfigMap name, key)`` of the job file a pod mounts at /etc/microagg/job.toml."""
    volumes = {v["name"]: v for v in pod.get("volumes", [])}
    found = []
    for c in pod["containers"]:
        for m in c.get("volumeMounts", []):
            cm = volumes[m["name"]].get("configMap")
            if cm is None:
                continue
            for item in cm.get("items", []):
                if os.path.join(m["mountPath"], item["path"]) == JOB_PATH:
                    found.append((cm["name"], item["key"]))
    return found


def configmap_text(name, key):
    for _, d in objects("ConfigMap"):
        if d["metadata"]["name"] == name:
            return d["data"][key]
    raise AssertionError(f"no ConfigMap {name}")


def shared_mounts(pod):
    """Mount paths of the PersistentVolumeClaims of a pod's main containers."""
    claims = {v["name"] for v in pod.get("volumes", []) if "persistentVolumeClaim" in v}
    return {m["mountPath"] for c in pod["containers"] for m in c.get("volumeMounts", []) if m["name"] in claims}


# --- YAML and Kubernetes ----------------------------------------------------------------------------------

def test_every_yaml_file_parses_into_kubernetes_objects():
    paths = files("*.yaml", "*.yml")
    docs = documents()
    assert {f for f, _ in docs} == {rel(p) for p in paths}  # no file without a document
    for where, doc in docs:
        assert isinstance(doc, dict), where
        assert doc.get("apiVersion") and doc.get("kind"), where
        name = doc.get("metadata", {}).get("name")
        assert name and K8S_NAME.match(name) and len(name) <= 63, f"{where}: metadata.name {name!r}"
    kinds = {d["kind"] for _, d in docs}
    assert {"DaskCluster", "DaskJob", "CronJob", "ConfigMap", "PersistentVolumeClaim"} <= kinds


# Kubernetes' own schemas (kubernetes-validate's copy, strict: an unknown field is an error, as the API server's
# strict field validation, kubectl's default, makes it), at every minor version from the oldest the manifests
# support (deploy/kubernetes/README.md) to the newest it holds.
OLDEST_KUBERNETES = (1, 29)
KUBERNETES_VERSIONS = sorted({v for v in kubernetes_validate.utils.all_versions()
                              if tuple(map(int, v.split(".")[:2])) >= OLDEST_KUBERNETES})
OPERATOR_CRDS = Path(importlib.util.find_spec("dask_kubernetes").submodule_search_locations[0]) / \
    "operator" / "customresources"
TEMPLATES_REF = "python://dask_kubernetes/operator/customresources/templates.yaml#/definitions/"
KUBERNETES_REF = "python://k8s_crd_resolver/schemata/k8s-1.21.1.json#/definitions/"


@cache
def kubernetes_definitions(version):
    """Kubernetes' strict definitions at ``version``, as a referencing registry (the ``$ref``s they hold)."""
    root = importlib.resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"v{version}-local-strict"
    return referencing.Resource.from_contents(json.loads((root / "_definitions.json").read_text())) @ \
        referencing.Registry()


@cache
def operator_schema(kind):
    """The Dask operator's openAPIV3Schema of ``kind`` (its CRD in the installed dask-kubernetes), resolved as its
    release resolves it: the operator's templates inlined, Kubernetes' definitions referenced (the pod specs,
    the scheduler's Service spec), and every object without ``additionalProperties`` closed, since the API
    server prunes (strictly: refuses) fields its structural schema does not name."""
    templates = yaml.safe_load((OPERATOR_CRDS / "templates.yaml").read_text())["definitions"]
    crd = yaml.safe_load((OPERATOR_CRDS / f"{kind.lower()}.yaml").read_text())
    assert crd["spec"]["names"]["kind"] == kind and crd["spec"]["group"] == "kubernetes.dask.org"

    def resolve(node):
        if isinstance(node, list):
            return [resolve(v) for v in node]
        if not isinstance(node, dict):
            return node
        ref = node.get("$ref", "")
        if ref.startswith(TEMPLATES_REF):
            return resolve(templates[ref.removeprefix(TEMPLATES_REF)])
        if ref.startswith(KUBERNETES_REF):
            return {"$ref": "https://kubernetes.io/api/_definitions.json#/$defs/" + ref.removeprefix(KUBERNETES_REF)}
        out = {key: resolve(v) for key, v in node.items()}
        if "properties" in out and "additionalProperties" not in out:
            out["additionalProperties"] = False
        return out

    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = resolve(version["schema"]["openAPIV3Schema"])
    schema["properties"] |= {"apiVersion": {"const": "kubernetes.dask.org/v1"}, "kind": {"const": kind},
                             "metadata": {"type": "object"}}
    return schema


def schema_errors(doc, version):
    """Every way ``doc`` breaks Kubernetes' schema at ``version`` (the operator's for its own kinds)."""
    if doc["apiVersion"] == "kubernetes.dask.org/v1":
        validator = jsonschema.Draft202012Validator(operator_schema(doc["kind"]),
                                                    registry=kubernetes_definitions(version))
        return [f"{'.'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(doc)]
    try:
        kubernetes_validate.validate(doc, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [f"{'.'.join(map(str, e.path))}: {e.message}"]
    return []


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_every_manifest_is_valid_against_kubernetes_and_the_dask_operator_schemas(version):
    """Every document validates against its kind's schema: Kubernetes' own (CronJob, ConfigMap,
    PersistentVolumeClaim) and the Dask Kubernetes operator's CRDs (DaskCluster, DaskJob), whose pod and
    Service specs are Kubernetes' at that version."""
    docs = documents()
    assert {d["kind"] for _, d in docs} >= {"DaskCluster", "DaskJob", "CronJob"}
    for where, doc in docs:
        assert not schema_errors(doc, version), f"{where} {doc['kind']} (Kubernetes {version}): " \
            f"{schema_errors(doc, version)}"


@pytest.mark.parametrize("kind, path, typo", [
    ("DaskCluster", ["spec", "worker"], ("replicas", "replica")),
    ("DaskCluster", ["spec", "scheduler", "spec", "containers", 0], ("args", "arg")),
    ("DaskJob", ["spec", "job", "spec", "containers", 0, "securityContext"],
     ("allowPrivilegeEscalation", "allowEscalation")),
    ("DaskJob", ["spec", "cluster", "spec", "scheduler", "service"], ("ports", "port")),
    ("CronJob", ["spec"], ("concurrencyPolicy", "concurrency")),
    ("CronJob", ["spec", "jobTemplate", "spec", "template", "spec"], ("restartPolicy", "restart")),
])
def test_a_misspelt_field_is_an_error_of_the_schema_check(kind, path, typo):
    """The check above is strict: a field renamed in one of these manifests (a typo Kubernetes would drop or
    refuse) makes it fail, naming where."""
    (_, doc), *_ = objects(kind)
    doc = copy.deepcopy(doc)
    node = doc
    for key in path:
        node = node[key]
    old, new = typo
    node[new] = node.pop(old)
    for version in KUBERNETES_VERSIONS:
        errors = schema_errors(doc, version)
        assert any(repr(new) in e for e in errors), errors


NAMESPACE = "microagg"


def operator_objects():
    """``(where, objects)``: for every DaskCluster and DaskJob, the objects the Dask Kubernetes operator creates from
    it, built by the operator's own functions (``dask_kubernetes.operator.controller``, as its handlers call them
    in namespace :data:`NAMESPACE`): the scheduler's Deployment and Service, the default DaskWorkerGroup and one
    of its worker Deployments, and a DaskJob's cluster and runner Pod."""
    from dask_kubernetes.operator.controller import controller as operator

    def cluster_objects(name, spec):
        scheduler, worker = spec["scheduler"], spec["worker"]
        return [operator.build_scheduler_deployment_spec(name, scheduler["spec"], {}, {}),
                operator.build_scheduler_service_spec(name, scheduler["service"], {}, {}),
                operator.build_default_worker_group_spec(name, worker, {}, {}),
                operator.build_worker_deployment_spec(f"{name}-default", NAMESPACE, name, "0a1b2", worker["spec"],
                                                      {}, {})]

    out = [(f"{f} DaskCluster", cluster_objects(d["metadata"]["name"], d["spec"])) for f, d in objects("DaskCluster")]
    for f, d in objects("DaskJob"):
        name, cluster = d["metadata"]["name"], d["spec"]["cluster"]["spec"]
        built = operator.build_cluster_spec(name, cluster["worker"], cluster["scheduler"], {}, {})
        out.append((f"{f} DaskJob", [built, *cluster_objects(name, built["spec"]),
                                     operator.build_job_pod_spec(name, name, NAMESPACE, d["spec"]["job"]["spec"],
                                                                 {}, {})]))
    return out


def pod_of(obj):
    """The metadata and PodSpec of a Deployment's template or of a Pod."""
    template = obj["spec"]["template"] if obj["kind"] == "Deployment" else obj
    return template["metadata"], template["spec"]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_what_the_dask_operator_creates_from_the_manifests_is_valid_and_wired(version):
    """The objects the operator makes of each DaskCluster and DaskJob (its own code builds them) are valid
    Kubernetes objects; the scheduler Service selects the scheduler's pod; every ``$(VAR)`` a container's
    command names is in its environment (Kubernetes leaves an undefined one as it is); and the workers and the
    job's containers reach the scheduler by the Service's name."""
    rendered = operator_objects()
    assert {where.rsplit(" ", 1)[1] for where, _ in rendered} == {"DaskCluster", "DaskJob"}
    for where, built in rendered:
        for obj in built:
            assert not schema_errors(obj, version), f"{where} -> {obj['kind']} {obj['metadata']['name']} " \
                f"(Kubernetes {version}): {schema_errors(obj, version)}"
        by_kind = {}
        for obj in built:
            by_kind.setdefault(obj["kind"], []).append(obj)
        service = by_kind["Service"][0]
        (scheduler,) = [o for o in by_kind["Deployment"] if pod_of(o)[0]["labels"]["dask.org/component"] == "scheduler"]
        assert service["spec"]["selector"].items() <= pod_of(scheduler)[0]["labels"].items(), where
        name = service["metadata"]["name"]
        addresses = {f"tcp://{h}:8786" for h in (name, f"{name}.{NAMESPACE}", f"{name}.{NAMESPACE}.svc",
                                                  f"{name}.{NAMESPACE}.svc.cluster.local")}
        for obj in by_kind["Deployment"] + by_kind.get("Pod", []):
            _, pod = pod_of(obj)
            for c in containers(pod):
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                for var in re.findall(r"\$\((\w+)\)", " ".join(c.get("command", []) + c.get("args", []))):
                    assert var in env, f"{where} -> {obj['metadata']['name']} {c['name']}: $({var}) is not set"
                if c in pod["containers"] and pod_of(obj)[0]["labels"]["dask.org/component"] != "scheduler":
                    assert env["DASK_SCHEDULER_ADDRESS"] in addresses, \
                        f"{where} -> {c['name']}: DASK_SCHEDULER_ADDRESS {env['DASK_SCHEDULER_ADDRESS']} " \
                        f"is not the Service {name}"


def test_dask_operator_resources_have_the_required_fields():
    for _, d in objects("DaskCluster") + objects("DaskJob"):
        assert d["apiVersion"] == "kubernetes.dask.org/v1"
    for _, d in objects("DaskJob"):
        assert d["spec"]["job"]["spec"]["containers"], "DaskJob spec.job.spec.containers"
        assert d["spec"]["cluster"]["spec"], "DaskJob spec.cluster.spec"
    assert clusters()
    for where, name, spec in clusters():
        # the operator's scheduler Service is <name>-scheduler: a DNS label of at most 63 characters
        assert len(f"{name}-scheduler") <= 63, where
        scheduler, worker = spec["scheduler"], spec["worker"]
        (container,) = scheduler["spec"]["containers"]
        assert container["args"][:2] == ["dask", "scheduler"], where
        named = {p["name"]: p["containerPort"] for p in container["ports"]}
        service = scheduler["service"]
        ports = {p["port"]: p for p in service["ports"]}
        assert {8786, 8787} <= set(ports), f"{where}: the scheduler Service must expose 8786 and 8787"
        assert named[ports[8786]["targetPort"]] == 8786 and named[ports[8787]["targetPort"]] == 8787, where
        assert service["selector"] == {"dask.org/cluster-name": name, "dask.org/component": "scheduler"}, where
        for probe in ("readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"]["path"] == "/health", where
        assert isinstance(worker["replicas"], int) and worker["replicas"] >= 1, where
        assert worker["spec"]["containers"], where


def test_workers_run_threads_within_their_memory_limits():
    for where, _, spec in clusters():
        for c in spec["worker"]["spec"]["containers"]:
            args, limits = c["args"], c["resources"]["limits"]
            assert args[:2] == ["dask", "worker"], where
            assert int(arg_after(args, "--nthreads")) == int(limits["cpu"]), \
                f"{where}: one thread per CPU of the pod"
            assert "--nworkers" not in args or arg_after(args, "--nworkers") == "1", where
            assert quantity(arg_after(args, "--memory-limit")) < quantity(limits["memory"]), \
                f"{where}: Dask's memory limit must sit below the container's"
            assert c["resources"]["requests"]["memory"] == limits["memory"], where


def test_every_container_uses_the_one_image():
    images = {c["image"] for _, _, pod in pod_specs() for c in containers(pod)}
    assert len(images) == 1, images
    (image,) = images
    assert ":" in image.rsplit("/", 1)[-1] and not image.endswith(":latest"), image


def test_pods_run_as_the_image_user_and_their_references_resolve():
    configmaps = {d["metadata"]["name"]: d["data"] for _, d in objects("ConfigMap")}
    claims = {d["metadata"]["name"] for _, d in objects("PersistentVolumeClaim")}
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    uid = int(re.search(r"ARG MICROAGG_UID=(\d+)", dockerfile).group(1))
    for where, role, pod in pod_specs():
        assert pod["securityContext"]["runAsNonRoot"] is True, where
        assert pod["securityContext"]["runAsUser"] == uid, where
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for c in containers(pod):
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, where
            for mount in c.get("volumeMounts", []):
                assert mount["name"] in volumes, f"{where} {role}: volume {mount['name']} is not defined"
        for v in volumes.values():
            if "configMap" in v:
                data = configmaps[v["configMap"]["name"]]
                assert all(item["key"] in data for item in v["configMap"].get("items", [])), where
            if "persistentVolumeClaim" in v:
                assert v["persistentVolumeClaim"]["claimName"] in claims, where
    for _, d in objects("PersistentVolumeClaim"):
        assert "ReadWriteMany" in d["spec"]["accessModes"], "the job and every worker mount the release volume"


def test_job_pods_run_their_job_file_on_a_cluster_that_shares_the_release_volume():
    """Every job pod runs `microagg run /etc/microagg/job.toml` from the ConfigMap; the job file names
    the scheduler Service of a cluster of these manifests (the one the pod waits for), and its release
    lies on a volume mounted at the same path in the job pod and in that cluster's workers."""
    by_address = {f"tcp://{name}-scheduler:8786": spec for _, name, spec in clusters()}
    job_pods = [(where, pod) for where, role, pod in pod_specs() if role == "job"]
    assert len(job_pods) >= 2
    for where, pod in job_pods:
        (main,) = pod["containers"]
        assert main["args"][0] == "microagg" and main["args"][-2:] == ["run", JOB_PATH], where
        assert pod["restartPolicy"] == "Never", where
        (mounted,) = mounted_job_files(pod)
        job = tomllib.loads(configmap_text(*mounted))
        address = job["cluster"]["scheduler"]
        assert address in by_address, f"{where}: {address} is no scheduler of deploy/kubernetes"
        if "DaskJob" in where:
            name = next(d["metadata"]["name"] for _, d in objects("DaskJob") if d["spec"]["job"]["spec"] is pod)
            assert address == f"tcp://{name}-scheduler:8786", f"{where}: the DaskJob's own cluster"
        for init in pod.get("initContainers", []):
            env = {e["name"]: e.get("value") for e in init.get("env", [])}
            assert env.get("DASK_SCHEDULER_ADDRESS") == address, f"{where}: waits for another scheduler"
            assert int(env["MIN_WORKERS"]) <= by_address[address]["worker"]["replicas"], \
                f"{where}: waits for more workers than the cluster has"
        output = job["output"]["path"]
        workers = by_address[address]["worker"]["spec"]
        shared = shared_mounts(pod) & shared_mounts(workers)
        assert any(output.startswith(m.rstrip("/") + "/") for m in shared), \
            f"{where}: the release {output} must be on a volume the job pod and the workers share"


def test_job_pods_keep_their_scratch_directory_on_the_volume_their_workers_share():
    """Every job pod sets Dask's temporary-directory (the job's scratch root: its rows in transit, an evaluation's
    QIs) to a directory of a volume mounted at the same path in the job pod and in its cluster's workers: the
    workers then see the job's scratch files and the rows go through them, not through all-to-all exchanges in
    the workers' memory (projected at 100 workers and 100M rows: about 38 s against about 180-220 s)."""
    by_address = {f"tcp://{name}-scheduler:8786": spec for _, name, spec in clusters()}
    job_pods = [(where, pod) for where, role, pod in pod_specs() if role == "job"]
    assert len(job_pods) >= 2
    for where, pod in job_pods:
        (main,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in main.get("env", [])}
        scratch = env.get("DASK_TEMPORARY_DIRECTORY")
        assert scratch and os.path.isabs(scratch), f"{where}: no scratch directory on a shared volume"
        (mounted,) = mounted_job_files(pod)
        address = tomllib.loads(configmap_text(*mounted))["cluster"]["scheduler"]
        shared = shared_mounts(pod) & shared_mounts(by_address[address]["worker"]["spec"])
        assert any(scratch.startswith(m.rstrip("/") + "/") for m in shared), \
            f"{where}: the scratch directory {scratch} must be on a volume the job pod and the workers share"


def test_job_pods_leave_the_job_its_stop_grace_before_the_kubelet_kills_it():
    """A job pod's grace period (the kubelet's SIGKILL after its SIGTERM) is longer than the job's own
    (``MICROAGG_STOP_GRACE``: the job leaves by itself then, with its exit code and one line saying so)."""
    from microagg.jobs import cli

    job_pods = [(where, pod) for where, role, pod in pod_specs() if role == "job"]
    assert len(job_pods) >= 2
    for where, pod in job_pods:
        (main,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in main.get("env", [])}
        grace = float(env.get(cli.STOP_GRACE_VARIABLE, cli.STOP_GRACE))
        assert pod.get("terminationGracePeriodSeconds", 30) >= grace + 10, where


def test_python_in_manifests_compiles():
    snippets = [(where, c["command"][2]) for where, _, pod in pod_specs() for c in containers(pod)
                if c.get("command", [])[:2] == ["python", "-c"]]
    assert snippets
    for where, code in snippets:
        compile(code, where, "exec")


CRON_FIELDS = [(0, 59, {}), (0, 23, {}), (1, 31, {}),
               (1, 12, {m: i + 1 for i, m in enumerate("jan feb mar apr may jun jul aug sep oct nov dec".split())}),
               (0, 7, {d: i for i, d in enumerate("sun mon tue wed thu fri sat".split())})]


def valid_cron(schedule):
    fields = schedule.split()
    if len(fields) != 5:
        return False

    def value(text, lo, hi, names):
        v = names.get(text.lower()) if text.isalpha() else int(text) if text.isdigit() else None
        return v is not None and lo <= v <= hi

    for field, (lo, hi, names) in zip(fields, CRON_FIELDS):
        for item in field.split(","):
            base, _, step = item.partition("/")
            if step and not (step.isdigit() and int(step) > 0):
                return False
            if base == "*":
                continue
            ends = base.split("-")
            if len(ends) > 2 or not all(value(e, lo, hi, names) for e in ends):
                return False
    return True


@pytest.mark.parametrize("schedule,ok", [("30 2 * * *", True), ("*/15 0-6 1,15 * mon-fri", True),
                                         ("30 2 * *", False), ("61 2 * * *", False), ("0 0 0 * *", False),
                                         ("@daily", False), ("0 0 * * 1/0", False)])
def test_cron_validator(schedule, ok):
    assert valid_cron(schedule) is ok


def test_cronjob_runs_nightly_and_never_overlaps():
    cronjobs = objects("CronJob")
    assert cronjobs
    for where, d in cronjobs:
        spec = d["spec"]
        assert valid_cron(spec["schedule"]), f"{where}: {spec['schedule']!r} is not a 5-field schedule"
        assert spec["concurrencyPolicy"] == "Forbid", where
        job = spec["jobTemplate"]["spec"]
        assert job["template"]["spec"]["restartPolicy"] in ("Never", "OnFailure"), where
        for rule in job.get("podFailurePolicy", {}).get("rules", []):
            if "onExitCodes" in rule:
                assert 0 not in rule["onExitCodes"]["values"] and 4 not in rule["onExitCodes"]["values"], \
                    f"{where}: 4 (scheduler unreachable) is the one failure worth a retry"


# --- job files ---------------------------------------------------------------------------------------------

def test_every_job_file_parses():
    found = job_files()
    assert any(where.startswith("deploy/kubernetes") for where, _ in found)
    for where, text in found:
        job = tomllib.loads(text)
        assert {"input", "output", "anonymize"} <= set(job), where


def test_every_job_file_validates(tmp_path):
    needs_command("validate")
    for i, (where, text) in enumerate(job_files()):
        if where.endswith(".toml") and (ROOT / where).exists():
            path = ROOT / where
        else:  # a ConfigMap's job file: same file name as mounted keys use, in a directory of its own
            path = tmp_path / str(i) / where.rsplit("/", 1)[-1]
            path.parent.mkdir()
            path.write_text(text)
        proc = subprocess.run([str(MICROAGG), "validate", str(path)], capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f"{where}:\n{proc.stdout}{proc.stderr}"


@pytest.fixture
def jobfile_module():
    needs_command("run")
    from microagg.jobs import jobfile

    return jobfile


def load_job_for_scheduler():
    sys.path.insert(0, str(DEPLOY))
    try:
        import job_for_scheduler
    finally:
        sys.path.remove(str(DEPLOY))
    return job_for_scheduler


def test_job_for_scheduler_changes_only_the_cluster(tmp_path, jobfile_module):
    helper = load_job_for_scheduler()
    source = tmp_path / "jobs" / "nightly.toml"
    source.parent.mkdir()
    source.write_text(
        '[input]\npath = "../data/extract/"\n\n'
        '[output]\npath = "../releases/{date}/{job}"\nrows_per_file = 5000\n\n'
        '[anonymize]\nk = 4\nquasi_identifiers = ["AGI", "FICA"]\nidentifiers = "person_id"\n'
        'blocks = [["AGI"], ["FICA"]]\nrelease_where = "AGI >= 0"\nepsilon = 0.5\nnoise = "laplace"\n\n'
        '[cluster]\nscheduler = "local"\nworkers = 2\nconnect_timeout = 30\n\n'
        '[report]\nhtml = true\njson = "../reports/{job}-{date}.json"\n'
    )
    copy = helper.write(source, "tcp://10.1.2.3:8786", tmp_path / "run")
    assert Path(copy) == tmp_path / "run" / "nightly.toml"  # same name: {job} unchanged
    original = jobfile_module.load(str(source), "2026-03-04")
    moved = jobfile_module.load(copy, "2026-03-04")
    assert moved.cluster == {**original.cluster, "scheduler": "tcp://10.1.2.3:8786", "workers": None}
    for field in ("name", "date", "input", "output", "options", "report", "html", "evaluation", "evaluate"):
        assert getattr(moved, field) == getattr(original, field), field
    assert moved.output == str(tmp_path / "releases" / "2026-03-04" / "nightly")
    with pytest.raises(ValueError):
        helper.write(source, "tcp://10.1.2.3:8786", source.parent)  # never over the original


def test_job_for_scheduler_writes_only_what_toml_can_read():
    helper = load_job_for_scheduler()
    doc = {"a": {"s": 'quote " backslash \\ tab \t é', "i": 3, "f": 0.25, "b": False, "l": [["x", "y"], ["z"]]}}
    assert tomllib.loads(helper.dumps(doc)) == doc
    with pytest.raises(TypeError):
        helper.dumps({"a": {"t": {"nested": 1}}})


# --- scripts, Python examples, Dockerfile ---------------------------------------------------------------

def test_shell_scripts_parse():
    for path in files("*.sh", "*.sbatch"):
        assert path.read_text().startswith("#!"), rel(path)
        assert os.access(path, os.X_OK), f"{rel(path)} is not executable"
        proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
        assert proc.returncode == 0, f"{rel(path)}: {proc.stderr}"


def test_sbatch_directives_precede_the_first_command():
    for path in files("*.sbatch"):
        lines = path.read_text().splitlines()
        first_command = next(i for i, line in enumerate(lines) if line.strip() and not line.startswith("#"))
        directives = [i for i, line in enumerate(lines) if line.startswith("#SBATCH")]
        assert directives and max(directives) < first_command, f"{rel(path)}: sbatch ignores later #SBATCH lines"
        text = "\n".join(lines)
        assert "trap cleanup EXIT" in text and "srun" in text and "dask worker" in text


def test_python_examples_compile():
    for path in files("*.py"):
        compile(path.read_text(), rel(path), "exec")
    source = (DEPLOY / "slurm" / "jobqueue_export.py").read_text()
    assert "SLURMCluster(" in source
    for keyword in ("cores=", "memory=", "walltime=", "job_extra_directives=", "processes=1"):
        assert keyword in source, keyword
    proc = subprocess.run([sys.executable, str(DEPLOY / "slurm" / "jobqueue_export.py"), "--help"],
                          capture_output=True, text=True, timeout=60)  # dask_jobqueue is imported later
    assert proc.returncode == 0 and "--walltime" in proc.stdout, proc.stderr


def dockerfile_instructions():
    text = (DEPLOY / "Dockerfile").read_text()
    logical = re.sub(r"\\\n(\s*#[^\n]*\n)*", " ", text)  # continuation lines (and comments inside them)
    out = []
    for line in logical.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            word, _, rest = line.partition(" ")
            out.append((word.upper(), rest.strip()))
    return out


def test_dockerfile_builds_one_warm_non_root_image():
    instructions = dockerfile_instructions()
    words = [w for w, _ in instructions]
    args = dict(re.match(r"(\w+)=?(.*)", rest).groups() for w, rest in instructions if w == "ARG")
    (base,) = [rest for w, rest in instructions if w == "FROM"]
    while "${" in base:  # an ARG's default may name an earlier ARG
        base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], base)
    version = re.fullmatch(r"python:3\.(\d+)-slim", base)
    assert version and int(version.group(1)) >= 11, base

    env = " ".join(rest for w, rest in instructions if w == "ENV")
    cache_dir = re.search(r"NUMBA_CACHE_DIR=(\S+)", env).group(1)
    assert cache_dir.startswith("/opt/microagg/"), "a persistent directory of the image, not /tmp"
    assert re.search(r"NUMBA_CPU_NAME=", env), "the CPU the cache is for must hold at run time too"

    users = [(i, rest) for i, (w, rest) in enumerate(instructions) if w == "USER"]
    assert users, "no USER: the containers would run as root"
    last_user = users[-1][1].split(":")[0]
    last_user = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], last_user)
    assert last_user not in ("root", "0"), last_user

    runs = [(i, rest) for i, (w, rest) in enumerate(instructions) if w == "RUN"]
    install = next(i for i, rest in runs if re.search(r"pip install \.(\s|$)", rest))
    assert any("NUMBA_CACHE_DIR" in rest and "mkdir" in rest for i, rest in runs if i < install), \
        "the cache directory is created (and given to the user) before the warm-up"
    warm = [(i, rest) for i, rest in runs if re.search(r"\bmicroagg\b.*\banonymize\b", rest)]
    assert warm, "no warm-up RUN invoking microagg"
    assert all(i > install and i > users[-1][0] for i, _ in warm), \
        "the warm-up runs after the install, as the image's user (who then owns the cache)"
    assert any("warm_numba_cache.py --strict" in rest for _, rest in warm)

    assert words.count("FROM") == 1 and ("ENTRYPOINT", "[]") in instructions, \
        "one image, no entrypoint: the command chooses scheduler, worker or job"
    for w, rest in instructions:
        if w == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                assert (ROOT / source).exists(), f"COPY {source}: not in the repository"


def test_dockerignore_lets_through_what_the_image_copies():
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.startswith("!")}
    for w, rest in dockerfile_instructions():
        if w == "COPY":
            *sources, _ = rest.split()
            for source in sources:
                assert source.rstrip("/") in allowed, f"{source} is excluded from the build context"


def test_every_way_of_starting_workers_shortens_the_connect_timeout():
    """A worker killed mid-job stalls its peers' fetches for Dask's connect timeout (30 s by default):
    the image, the plain recipe and both Slurm examples set jobs/cluster.py's PEER_CONNECT_TIMEOUT."""
    setting = re.compile(r"DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT=\"?(?:\$\{DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT:-)?"
                         r"([0-9]+s)")
    for path in (DEPLOY / "Dockerfile", DEPLOY / "plain" / "start-worker.sh",
                 DEPLOY / "slurm" / "microagg-export.sbatch", DEPLOY / "slurm" / "jobqueue_export.py"):
        values = setting.findall(path.read_text())
        assert values == [PEER_CONNECT_TIMEOUT], f"{rel(path)}: {values}"


def test_every_way_of_starting_workers_gives_arrow_the_system_allocator():
    """Worker processes deploy/ starts read Parquet with Arrow's buffers from malloc, as the CLI's own
    processes do (jobs/cluster.py: use_system_allocator), unless the environment says otherwise."""
    setting = re.compile(r"ARROW_DEFAULT_MEMORY_POOL=\"?(?:\$\{ARROW_DEFAULT_MEMORY_POOL:-)?([a-z]+)")
    for path in (DEPLOY / "Dockerfile", DEPLOY / "plain" / "start-worker.sh",
                 DEPLOY / "slurm" / "microagg-export.sbatch", DEPLOY / "slurm" / "jobqueue_export.py"):
        assert setting.findall(path.read_text()) == ["system"], rel(path)


def test_every_way_of_starting_workers_sets_the_allocator_thresholds():
    """Worker processes deploy/ starts get the CLI's glibc allocator settings through Dask's nanny
    (jobs/cluster.py: ALLOCATOR_THRESHOLDS), in a form Dask's configuration reads."""
    literal = re.compile(r"'(\{\"MALLOC_[^']*\})'")
    for path in (DEPLOY / "Dockerfile", DEPLOY / "plain" / "start-worker.sh",
                 DEPLOY / "slurm" / "microagg-export.sbatch", DEPLOY / "slurm" / "jobqueue_export.py"):
        text = path.read_text()
        assert "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON" in text, rel(path)
        (value,) = literal.findall(text)
        assert json.loads(value) == ALLOCATOR_THRESHOLDS, rel(path)
    # as a worker's nanny reads the variable: merged into Dask's defaults, which keep their other variables
    show = "import dask, distributed, json; print(json.dumps(dask.config.get('distributed.nanny.pre-spawn-environ')))"
    proc = subprocess.run([sys.executable, "-c", show], capture_output=True, text=True, check=True, timeout=60,
                          env={**os.environ, "DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON": value})
    environ = json.loads(proc.stdout)
    assert {name: environ[name] for name in ALLOCATOR_THRESHOLDS} == ALLOCATOR_THRESHOLDS
    assert environ["OMP_NUM_THREADS"] == 1


def test_the_sbatch_script_gives_the_allocator_thresholds_from_the_cli_s_worker_size():
    """The sbatch script's shell test is the CLI's rule (jobs/cluster.py: ROOMY_WORKER), and so is the
    jobqueue example's (it calls ``roomy``)."""
    from microagg.jobs.cluster import ROOMY_WORKER

    (mib,) = re.findall(r'if \[ "\$memory_mib" -ge (\d+) \]', (DEPLOY / "slurm" / "microagg-export.sbatch").read_text())
    assert int(mib) * 2**20 == ROOMY_WORKER
    assert "if roomy(parse_bytes(args.memory))" in (DEPLOY / "slurm" / "jobqueue_export.py").read_text()


@pytest.mark.slow
def test_warm_up_compiles_every_kernel():
    """What the image build runs (`--strict` fails the build when a new kernel is not warmed up)."""
    proc = subprocess.run([sys.executable, str(DEPLOY / "warm_numba_cache.py"), "--strict"],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    assert "every microagg kernel is compiled" in proc.stdout


# --- end to end on 127.0.0.1 ----------------------------------------------------------------------------

def _wait_for_file(path, procs, seconds=60):
    deadline = time.monotonic() + seconds
    while not path.exists() or not path.stat().st_size:
        if any(p.poll() is not None for p in procs):
            raise RuntimeError("a Dask process exited early")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path} did not appear within {seconds} s")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def plain_cluster(tmp_path_factory):
    """The plain recipe's scripts on loopback: start-scheduler.sh and two start-worker.sh (one thread
    each); terminated at the end whatever happens (the scripts exec dask, so the pids are dask's)."""
    root = tmp_path_factory.mktemp("plain")
    info = root / "scheduler.json"
    # a fresh shell's environment: without the MALLOC_* variables the nannies of earlier tests'
    # clusters left in this process's (Dask sets them here before it starts a worker process)
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")},
           "DASK": str(DASK), "SCHEDULER_PORT": "0", "DASHBOARD_ADDRESS": "127.0.0.1:0",
           "NTHREADS": "1", "MEMORY_LIMIT": "2GiB", "LOCAL_DIRECTORY": str(root)}
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env}
    procs = [subprocess.Popen([str(DEPLOY / "plain" / "start-scheduler.sh"), "--host", "127.0.0.1",
                               "--scheduler-file", str(info), "--no-dashboard"], **quiet)]
    try:
        _wait_for_file(info, procs)
        for i in range(2):
            procs.append(subprocess.Popen([str(DEPLOY / "plain" / "start-worker.sh"), "--scheduler-file", str(info),
                                           "--host", "127.0.0.1", "--name", f"w{i}", "--no-dashboard"], **quiet))
        yield cluster_address(info, workers=2)
    finally:
        stop_processes(procs)


def census_qi():
    return list(pd.read_csv(CENSUS_CSV, nrows=1).columns)


def assert_release(path, k, workers=2):
    assert (path / "_SUCCESS").exists(), f"no release at {path}"
    report = json.loads((path / "_report.json").read_text())
    assert report["workers"]["count"] == workers, "the job did not run on the cluster"
    released = pd.read_parquet(path)
    assert len(released) == len(pd.read_csv(CENSUS_CSV))
    assert_k_anonymous(released, census_qi(), k)


@pytest.mark.cluster
def test_plain_recipe_runs_a_job_file_on_the_cluster(tmp_path, plain_cluster):
    needs_command("run")
    (tmp_path / "data").mkdir()
    shutil.copy(CENSUS_CSV, tmp_path / "data" / "census.csv")
    job = tmp_path / "jobs" / "census.toml"
    job.parent.mkdir()
    job.write_text('[input]\npath = "../data/census.csv"\n\n[output]\npath = "../releases/{date}/{job}"\n\n'
                   '[anonymize]\nk = 3\nblock_size = 300\nblocks_per_task = 1\n\n'
                   '[cluster]\nscheduler = "local"\nworkers = 1\n')
    env = {**os.environ, "MICROAGG": str(MICROAGG), "PYTHON": sys.executable}
    proc = subprocess.run([str(DEPLOY / "plain" / "run-job.sh"), str(job), plain_cluster, "--date", "2026-03-04"],
                          capture_output=True, text=True, env=env, timeout=240)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert_release(tmp_path / "releases" / "2026-03-04" / "census", 3)


@pytest.mark.cluster
def test_plain_recipe_runs_anonymize_on_the_cluster(tmp_path, plain_cluster):
    out = tmp_path / "release"
    proc = subprocess.run([str(MICROAGG), "anonymize", str(CENSUS_CSV), str(out), "--k", "5", "--block-size", "300",
                           "--scheduler", plain_cluster], capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr
    assert_release(out, 5)
    from distributed import Client

    with Client(plain_cluster, timeout="30s") as client:  # the workers took start-worker.sh's setting
        timeouts = client.run(lambda: __import__("dask").config.get("distributed.comm.timeouts.connect"))
        allocator = client.run(lambda: {name: os.environ.get(name) for name in ALLOCATOR_THRESHOLDS})
    assert sorted(timeouts.values()) == [PEER_CONNECT_TIMEOUT] * 2
    assert list(allocator.values()) == [{name: str(v) for name, v in ALLOCATOR_THRESHOLDS.items()}] * 2


def _processes_mentioning(text):
    """Pids of this user's processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text in (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"):
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


@pytest.fixture
def sbatch_env(tmp_path):
    """The sbatch script's environment on this machine: two 'nodes' that are both this machine (Dask on
    the loopback interface), and an ``srun`` that starts one task of its command per node."""
    if not Path("/proc/self/cmdline").exists():
        pytest.skip("needs /proc to check that no process outlives the script")
    fake = tmp_path / "bin"
    fake.mkdir()
    srun = fake / "srun"
    srun.write_text('#!/usr/bin/env bash\n# stand-in for srun: one task per node, all on this machine\n'
                    'n=1\nwhile [[ "$1" == -* ]]; do [[ "$1" == --ntasks=* ]] && n=${1#--ntasks=}; shift; done\n'
                    'pids=()\nfor i in $(seq "$n"); do "$@" & pids+=($!); done\n'
                    'trap \'kill "${pids[@]}" 2>/dev/null\' TERM INT\nwait\n')
    srun.chmod(0o755)
    return {**os.environ, "PATH": f"{fake}:{os.environ['PATH']}", "MICROAGG_VENV": str(BIN.parent),
            "MICROAGG_DEPLOY_DIR": str(DEPLOY), "MICROAGG_WORK_DIR": str(tmp_path), "MICROAGG_INTERFACE": "lo",
            "SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_ID": "4242", "SLURM_JOB_NUM_NODES": "2",
            "SLURM_CPUS_PER_TASK": "1", "SLURM_MEM_PER_NODE": "2048", "TMPDIR": str(tmp_path),
            # the test suite's own Numba cache, not the script's shared generic one (a cold compile)
            "NUMBA_CACHE_DIR": "", "NUMBA_CPU_NAME": ""}


@pytest.mark.cluster
def test_sbatch_script_runs_a_job_and_leaves_nothing_behind(tmp_path, sbatch_env):
    needs_command("run")
    job = tmp_path / "census.toml"
    job.write_text(f'[input]\npath = "{CENSUS_CSV}"\n\n[output]\npath = "releases/{{date}}"\n\n'
                   '[anonymize]\nk = 4\nblock_size = 300\nblocks_per_task = 1\n')
    work = tmp_path / ".microagg-slurm-4242"
    proc = subprocess.run(["bash", str(DEPLOY / "slurm" / "microagg-export.sbatch"), str(job), "--date", "2026-03-04"],
                          capture_output=True, text=True, env=sbatch_env, timeout=240, cwd=tmp_path)
    try:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert_release(tmp_path / "releases" / "2026-03-04", 4)
        assert not work.exists(), "the scheduler file's directory is removed on exit"
        deadline = time.monotonic() + 30
        while _processes_mentioning(str(work)) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not _processes_mentioning(str(work)), "a Dask process outlived the batch script"
    finally:
        for pid in _processes_mentioning(str(work)):
            os.kill(pid, 9)


def test_sbatch_script_refuses_a_bad_job_file_before_starting_dask(tmp_path, sbatch_env):
    needs_command("validate")
    job = tmp_path / "bad.toml"
    job.write_text('[input]\npath = "x.csv"\n\n[output]\npath = "out"\n\n[anonymize]\nk = 1\n')
    proc = subprocess.run(["bash", str(DEPLOY / "slurm" / "microagg-export.sbatch"), str(job)],
                          capture_output=True, text=True, env=sbatch_env, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "[anonymize] k" in proc.stderr
    assert not (tmp_path / ".microagg-slurm-4242").exists()
