"""The Kubernetes manifests are valid for real clusters and wire the probes, GPU and scaling."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest

from tests.deploy.deployfiles import (
    OVERLAYS,
    Stage,
    base_manifests,
    by_kind,
    load_documents,
    render_overlay,
)

# The newest schemas kubernetes-validate ships and an older, still common minor release.
KUBERNETES_VERSIONS = (kubernetes_validate.latest_version(), "1.30.0")


def validate_strictly(document: dict[str, Any], version: str) -> None:
    kubernetes_validate.validate(document, version, strict=True)


def container(documents: list[dict[str, Any]]) -> dict[str, Any]:
    (only,) = by_kind(documents, "Deployment")["spec"]["template"]["spec"]["containers"]
    return only


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("path", base_manifests(), ids=lambda p: p.name)
def test_every_base_manifest_validates_against_the_kubernetes_schema(
    path: Path, version: str
) -> None:
    for document in load_documents(path):
        validate_strictly(document, version)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_rendered_overlay_validates_against_the_kubernetes_schema(
    overlay: str, version: str
) -> None:
    documents = render_overlay(overlay)
    kinds = sorted(doc["kind"] for doc in documents)
    assert kinds == sorted(
        [
            "ConfigMap",
            "Deployment",
            "HorizontalPodAutoscaler",
            "Namespace",
            "PodDisruptionBudget",
            "Service",
        ]
    )
    for document in documents:
        validate_strictly(document, version)


def test_strict_validation_rejects_a_misspelled_field(deployment: dict[str, Any]) -> None:
    broken = copy.deepcopy(deployment)
    broken["spec"]["replica"] = broken["spec"].pop("replicas")
    with pytest.raises(kubernetes_validate.ValidationError, match="replica"):
        validate_strictly(broken, kubernetes_validate.latest_version())


def test_base_kustomization_lists_every_base_manifest() -> None:
    kustomization = load_documents(base_manifests()[0].parent / "kustomization.yaml")[0]
    assert sorted(kustomization["resources"]) == sorted(p.name for p in base_manifests())


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_startup_readiness_and_liveness_probes_all_ask_health_on_the_served_port(
    overlay: str,
) -> None:
    documents = render_overlay(overlay)
    spec = container(documents)
    (port,) = spec["ports"]
    assert port == {"name": "http", "containerPort": 8000, "protocol": "TCP"}
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert spec[probe]["httpGet"] == {"path": "/health", "port": "http"}
    service = by_kind(documents, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "http"


@pytest.mark.parametrize(("overlay", "minimum_s"), [("cpu", 300), ("cuda", 600)])
def test_startup_probe_allows_for_model_load_and_the_exactness_probe(
    overlay: str, minimum_s: int
) -> None:
    probe = container(render_overlay(overlay))["startupProbe"]
    assert probe["periodSeconds"] * probe["failureThreshold"] >= minimum_s


def test_pods_read_the_configmap_as_their_environment() -> None:
    documents = render_overlay("cpu")
    configmap = by_kind(documents, "ConfigMap")
    assert container(documents)["envFrom"] == [
        {"configMapRef": {"name": configmap["metadata"]["name"]}}
    ]


def test_cpu_overlay_runs_the_cpu_image_with_no_gpu() -> None:
    spec = container(render_overlay("cpu"))
    assert spec["image"] == "draftwise:cpu"
    assert "nvidia.com/gpu" not in spec["resources"]["limits"]
    assert {"cpu", "memory"} <= set(spec["resources"]["requests"])


def test_cuda_overlay_runs_the_cuda_image_on_one_gpu_and_scales_on_queue_depth() -> None:
    documents = render_overlay("cuda")
    spec = container(documents)
    assert spec["image"] == "draftwise:cuda"
    assert spec["resources"]["limits"]["nvidia.com/gpu"] == 1
    (metric,) = by_kind(documents, "HorizontalPodAutoscaler")["spec"]["metrics"]
    assert metric["type"] == "Pods"
    assert metric["pods"]["metric"]["name"] == "draftwise_queue_depth"


def test_cpu_autoscaler_scales_the_deployment_on_cpu() -> None:
    documents = render_overlay("cpu")
    hpa = by_kind(documents, "HorizontalPodAutoscaler")
    assert (
        hpa["spec"]["scaleTargetRef"]["name"]
        == by_kind(documents, "Deployment")["metadata"]["name"]
    )
    (metric,) = hpa["spec"]["metrics"]
    assert metric["resource"]["name"] == "cpu"


def test_disruption_budget_and_service_select_the_deployments_pods() -> None:
    documents = render_overlay("cpu")
    labels = by_kind(documents, "Deployment")["spec"]["template"]["metadata"]["labels"]
    pdb_selector = by_kind(documents, "PodDisruptionBudget")["spec"]["selector"]["matchLabels"]
    service_selector = by_kind(documents, "Service")["spec"]["selector"]
    assert pdb_selector.items() <= labels.items()
    assert service_selector.items() <= labels.items()


def test_pods_run_as_the_images_non_root_user(deployment: dict[str, Any], cpu_image: Stage) -> None:
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] == 10001
    mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    # The root filesystem is read-only: the cache directory must be a writable volume.
    assert cpu_image.env["DRAFTWISE_CACHE_DIR"] in mounts
