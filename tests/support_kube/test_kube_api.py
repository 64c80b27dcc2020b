"""The emulated API server answers plain HTTP as the real Kubernetes API server does.

Each test names the real behaviour it mirrors (API concepts: "Resource versions", "Patch",
"Efficient detection of changes", "Status subresource"; authorization: SelfSubjectAccessReview).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import pytest
import requests
import yaml
from kube_cluster import KubeCluster

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
WEB = f"{DEPLOYMENTS}/web"
SMP = "application/strategic-merge-patch+json"
MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
HANG_BOUND = 10.0
"""Only a hang takes this long (seconds); never a timing assertion."""

MAIN = {
    "name": "main",
    "image": "registry.example/web:1.0",
    "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"memory": "1Gi"}},
    "env": [{"name": "GOGC", "value": "100"}, {"name": "MODE", "value": "fast"}],
}
SIDECAR = {
    "name": "proxy",
    "image": "registry.example/proxy:2.0",
    "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}},
}


def containers_of(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {container["name"]: container for container in obj["spec"]["template"]["spec"]["containers"]}


def test_the_kubeconfig_names_the_emulated_context_and_its_token_is_required(
    cluster: KubeCluster, api
) -> None:
    config = yaml.safe_load(cluster.kubeconfig.read_text())
    assert config["current-context"] == "emulated"
    context = config["contexts"][0]["context"]
    assert context["namespace"] == "default"
    assert config["clusters"][0]["cluster"]["server"] == cluster.url
    assert cluster.url.startswith("http://127.0.0.1:")
    assert api.get("/version").json()["major"] == "1"
    anonymous = requests.get(cluster.url + "/version", timeout=HANG_BOUND)
    assert anonymous.status_code == 401
    assert anonymous.json()["kind"] == "Status"


def test_a_deployment_starts_rolled_out_with_identity_and_versions(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN], replicas=3)
    got = api.get(WEB)
    assert got.status_code == 200
    deployment = got.json()
    meta = deployment["metadata"]
    assert meta["generation"] == 1
    assert meta["resourceVersion"].isdigit() and meta["uid"]
    assert meta["annotations"]["deployment.kubernetes.io/revision"] == "1"
    status = deployment["status"]
    assert status["observedGeneration"] == 1
    assert status["replicas"] == status["updatedReplicas"] == status["readyReplicas"] == 3
    assert len(cluster.pods("web")) == 3
    assert api.get(f"{DEPLOYMENTS}/nope").status_code == 404


def test_strategic_merge_merges_containers_and_env_by_name_and_resources_key_by_key(
    cluster: KubeCluster, api
) -> None:
    cluster.add_deployment("web", containers=[MAIN, SIDECAR])
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "resources": {"requests": {"cpu": "250m"}},
                            "env": [
                                {"name": "GOGC", "value": "50"},
                                {"name": "NEW", "value": "1"},
                                {"name": "MODE", "$patch": "delete"},
                            ],
                        }
                    ]
                }
            }
        }
    }
    answer = api.patch(WEB, patch, SMP)
    assert answer.status_code == 200, answer.text
    containers = containers_of(answer.json())
    assert list(containers) == ["main", "proxy"]  # the sidecar survives a patch that does not name it
    assert containers["proxy"]["resources"] == SIDECAR["resources"]
    assert containers["main"]["resources"] == {
        "requests": {"cpu": "250m", "memory": "512Mi"},
        "limits": {"memory": "1Gi"},
    }
    assert containers["main"]["env"] == [{"name": "GOGC", "value": "50"}, {"name": "NEW", "value": "1"}]
    assert containers_of(cluster.get("deployment", "web")) == containers


def test_merge_patch_replaces_lists_and_json_patch_applies_operations(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN, SIDECAR])
    replaced = api.patch(
        WEB, {"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x:1"}]}}}}, MERGE
    )
    assert replaced.status_code == 200
    assert list(containers_of(replaced.json())) == ["only"]
    operations = [
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": "x:2"},
        {"op": "add", "path": "/metadata/labels/tier", "value": "front"},
    ]
    patched = api.patch(WEB, operations, JSON_PATCH)
    assert patched.status_code == 200
    assert containers_of(patched.json())["only"]["image"] == "x:2"
    assert patched.json()["metadata"]["labels"]["tier"] == "front"
    broken = api.patch(WEB, [{"op": "remove", "path": "/spec/nothing/here"}], JSON_PATCH)
    assert broken.status_code == 422


def test_a_patch_in_an_unsupported_media_type_answers_415(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    before = cluster.get("deployment", "web")
    answer = api.patch(WEB, {"spec": {"replicas": 5}}, "application/json")
    assert answer.status_code == 415
    assert answer.json()["reason"] == "UnsupportedMediaType"
    assert SMP in answer.json()["message"]
    assert cluster.get("deployment", "web") == before


def test_every_write_bumps_resource_version_and_a_stale_one_answers_409(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    first = cluster.get("deployment", "web")["metadata"]["resourceVersion"]
    labelled = api.patch(WEB, {"metadata": {"labels": {"tier": "front"}}}, MERGE).json()
    second = labelled["metadata"]["resourceVersion"]
    assert int(second) > int(first)
    stale = api.patch(WEB, {"metadata": {"resourceVersion": first}, "spec": {"replicas": 7}}, MERGE)
    assert stale.status_code == 409
    body = stale.json()
    assert (body["kind"], body["reason"], body["code"]) == ("Status", "Conflict", 409)
    assert body["details"] == {"name": "web", "group": "apps", "kind": "deployments"}
    assert cluster.get("deployment", "web")["spec"]["replicas"] == 2
    fresh = api.patch(WEB, {"metadata": {"resourceVersion": second}, "spec": {"replicas": 7}}, MERGE)
    assert fresh.status_code == 200
    assert fresh.json()["spec"]["replicas"] == 7


def test_a_put_with_a_stale_resource_version_answers_409(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    current = cluster.get("deployment", "web")
    stale = json.loads(json.dumps(current))
    api.patch(WEB, {"metadata": {"labels": {"x": "y"}}}, MERGE)
    stale["spec"]["replicas"] = 4
    assert api.request("PUT", WEB, json=stale).status_code == 409


def test_generation_moves_on_spec_changes_only_and_a_no_op_keeps_the_version(
    cluster: KubeCluster, api
) -> None:
    cluster.add_deployment("web")
    start = cluster.get("deployment", "web")["metadata"]
    relabelled = api.patch(WEB, {"metadata": {"labels": {"tier": "front"}}}, MERGE).json()["metadata"]
    assert relabelled["generation"] == start["generation"]
    assert relabelled["resourceVersion"] != start["resourceVersion"]
    scaled = api.patch(WEB, {"spec": {"replicas": 4}}, MERGE).json()["metadata"]
    assert scaled["generation"] == start["generation"] + 1
    same = api.patch(WEB, {"spec": {"replicas": 4}}, MERGE).json()["metadata"]
    assert same["resourceVersion"] == scaled["resourceVersion"]
    assert same["generation"] == scaled["generation"]


def test_status_is_written_through_the_status_subresource_only(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    before = cluster.get("deployment", "web")
    ignored = api.patch(WEB, {"status": {"replicas": 99}}, MERGE).json()
    assert ignored["status"] == before["status"]
    written = api.patch(f"{WEB}/status", {"status": {"replicas": 99}, "spec": {"replicas": 9}}, MERGE).json()
    assert written["status"]["replicas"] == 99
    assert written["spec"]["replicas"] == before["spec"]["replicas"]
    assert written["metadata"]["generation"] == before["metadata"]["generation"]
    assert api.get(f"{WEB}/status").json()["status"]["replicas"] == 99
    assert api.get(f"{WEB}/scale-me").status_code == 404


def test_conflict_next_refuses_that_many_writes_and_the_log_records_them(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    cluster.conflict_next("deployment", "web", times=2)
    codes = [api.patch(WEB, {"spec": {"replicas": 3}}, SMP).status_code for _ in range(3)]
    assert codes == [409, 409, 200]
    writes = [entry for entry in cluster.patch_log if entry[1] == WEB]
    assert len(writes) == 3
    method, path, body, headers = writes[-1]
    assert (method, path, body) == ("PATCH", WEB, {"spec": {"replicas": 3}})
    assert headers["Content-Type"] == SMP


def test_label_and_field_selectors_filter_lists(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", labels={"app": "web", "tier": "front"})
    cluster.add_deployment("api", labels={"app": "api", "tier": "back"})

    def names(selector: str, field: str = "labelSelector") -> list[str]:
        answer = api.get(DEPLOYMENTS, params={field: selector})
        assert answer.status_code == 200, answer.text
        assert answer.json()["kind"] == "DeploymentList"
        return sorted(item["metadata"]["name"] for item in answer.json()["items"])

    assert names("") == ["api", "web"]
    assert names("app=web") == ["web"]
    assert names("tier!=front") == ["api"]
    assert names("app in (web,api),tier notin (back)") == ["web"]
    assert names("tier") == ["api", "web"]
    assert names("!tier") == []
    assert names("metadata.name=api", "fieldSelector") == ["api"]
    pods = api.get("/api/v1/namespaces/default/pods", params={"labelSelector": "app=web"}).json()["items"]
    assert len(pods) == 2 and all(pod["metadata"]["name"].startswith("web-") for pod in pods)
    assert api.get(DEPLOYMENTS, params={"labelSelector": "app in web"}).status_code == 400


def test_a_watch_replays_state_then_changes_and_ends_at_timeout_seconds(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    started = time.monotonic()
    stream = api.get(DEPLOYMENTS, params={"watch": "true", "timeoutSeconds": "1"}, stream=True)
    events = [json.loads(line) for line in stream.iter_lines() if line]
    assert time.monotonic() - started < HANG_BOUND
    assert [(event["type"], event["object"]["metadata"]["name"]) for event in events] == [("ADDED", "web")]


def test_a_watch_from_a_resource_version_sends_only_later_events(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    cluster.add_deployment("api")
    since = cluster.get("deployment", "web")["metadata"]["resourceVersion"]
    received: list[dict[str, Any]] = []

    def watch() -> None:
        params = {
            "watch": "true",
            "resourceVersion": since,
            "timeoutSeconds": "5",
            "fieldSelector": "metadata.name=web",
        }
        with api.get(DEPLOYMENTS, params=params, stream=True) as stream:
            for line in stream.iter_lines():
                if line:
                    received.append(json.loads(line))
                    return

    watcher = threading.Thread(target=watch)
    watcher.start()
    patched = api.patch(WEB, {"spec": {"replicas": 3}}, MERGE).json()
    watcher.join(HANG_BOUND)
    assert not watcher.is_alive()
    assert [(event["type"], event["object"]["metadata"]["resourceVersion"]) for event in received] == [
        ("MODIFIED", patched["metadata"]["resourceVersion"])
    ]


def test_self_subject_access_reviews_follow_deny_and_denied_requests_answer_403(
    cluster: KubeCluster, api
) -> None:
    cluster.add_deployment("web")
    cluster.deny("patch", "deployments", "apps")

    def review(verb: str, resource: str, group: str) -> dict[str, Any]:
        body = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {
                "resourceAttributes": {
                    "namespace": "default",
                    "verb": verb,
                    "group": group,
                    "resource": resource,
                }
            },
        }
        answer = api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=body)
        assert answer.status_code == 201
        return answer.json()

    denied = review("patch", "deployments", "apps")
    assert denied["kind"] == "SelfSubjectAccessReview" and denied["status"]["allowed"] is False
    assert denied["spec"]["resourceAttributes"]["verb"] == "patch"
    assert review("get", "deployments", "apps")["status"]["allowed"] is True
    assert review("patch", "horizontalpodautoscalers", "autoscaling")["status"]["allowed"] is True
    refused = api.patch(WEB, {"spec": {"replicas": 3}}, SMP)
    assert refused.status_code == 403 and refused.json()["reason"] == "Forbidden"
    assert api.get(WEB).status_code == 200
    cluster.allow("patch", "deployments", "apps")
    assert api.patch(WEB, {"spec": {"replicas": 3}}, SMP).status_code == 200


def test_down_refuses_connections_and_ends_watches_and_up_keeps_the_state(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    before = cluster.get("deployment", "web")
    opened, ended = threading.Event(), threading.Event()

    def watch() -> None:
        try:
            with api.get(DEPLOYMENTS, params={"watch": "true"}, stream=True) as stream:
                opened.set()  # the server has answered the watch's headers: it is open
                for _ in stream.iter_lines():
                    pass
        except requests.RequestException:
            pass
        ended.set()

    watcher = threading.Thread(target=watch)
    watcher.start()
    assert opened.wait(HANG_BOUND)  # the watch is open before the server goes; a late one is refused instead
    cluster.down()
    assert ended.wait(HANG_BOUND)
    watcher.join(HANG_BOUND)
    with pytest.raises(requests.ConnectionError):
        requests.get(cluster.url + "/version", timeout=HANG_BOUND)
    cluster.up()
    after = api.get(WEB).json()
    assert after == before
    assert api.patch(WEB, {"spec": {"replicas": 3}}, SMP).status_code == 200


def test_metrics_api_is_absent_until_metrics_are_set(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN])
    path = "/apis/metrics.k8s.io/v1beta1/namespaces/default/pods"
    assert api.get(path).status_code == 404
    cluster.set_metrics("web", cpu="250m", memory="300Mi")
    listed = api.get(path, params={"labelSelector": "app=web"}).json()
    assert listed["kind"] == "PodMetricsList"
    assert len(listed["items"]) == 2
    usage = listed["items"][0]["containers"][0]
    assert usage == {"name": "main", "usage": {"cpu": "250m", "memory": "300Mi"}}
    one = listed["items"][0]["metadata"]["name"]
    assert api.get(f"{path}/{one}").json()["metadata"]["name"] == one


def test_quantities_are_stored_in_canonical_form(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN])
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "main",
                            "resources": {
                                "requests": {"cpu": "0.5", "memory": "1024Mi"},
                                "limits": {"cpu": "1000m", "memory": "1.5Gi"},
                            },
                        }
                    ]
                }
            }
        }
    }
    stored = api.patch(WEB, patch).json()
    assert containers_of(stored)["main"]["resources"] == {
        "requests": {"cpu": "500m", "memory": "1Gi"},
        "limits": {"cpu": "1", "memory": "1536Mi"},
    }


@pytest.mark.parametrize(
    ("resources", "code", "words"),
    [
        (
            {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
            422,
            "must be less than or equal to cpu limit of 1",
        ),
        ({"requests": {"memory": "lots"}}, 400, "quantities must match the regular expression"),
        ({"requests": {"cpu": "-1"}}, 422, "must be greater than or equal to 0"),
    ],
)
def test_invalid_resources_are_refused_and_nothing_changes(
    cluster: KubeCluster, api, resources: dict[str, Any], code: int, words: str
) -> None:
    cluster.add_deployment("web", containers=[MAIN])
    before = cluster.get("deployment", "web")
    answer = api.patch(
        WEB, {"spec": {"template": {"spec": {"containers": [{"name": "main", "resources": resources}]}}}}
    )
    assert answer.status_code == code
    assert words in answer.json()["message"]
    assert answer.json()["message"].startswith(
        'Deployment.apps "web" is invalid: spec.template.spec.containers[0]'
    )
    assert cluster.get("deployment", "web") == before


def test_other_invalid_writes_are_refused_as_the_real_server_does(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", containers=[MAIN])
    cluster.add_hpa("web", "web")
    env = api.patch(
        WEB,
        {
            "spec": {
                "template": {
                    "spec": {"containers": [{"name": "main", "env": [{"name": "GOGC", "value": 50}]}]}
                }
            }
        },
    )
    assert env.status_code == 400 and "of type string" in env.json()["message"]
    selector = api.patch(WEB, {"spec": {"selector": {"matchLabels": {"app": "other"}}}}, MERGE)
    assert selector.status_code == 422 and "field is immutable" in selector.json()["message"]
    assert api.patch(WEB, {"spec": {"replicas": -1}}, MERGE).status_code == 422
    hpa = "/apis/autoscaling/v2/namespaces/default/horizontalpodautoscalers/web"
    bounds = api.patch(hpa, {"spec": {"minReplicas": 4, "maxReplicas": 3}}, MERGE)
    assert (
        bounds.status_code == 422
        and "must be greater than or equal to `minReplicas`" in bounds.json()["message"]
    )
    assert bounds.json()["details"]["causes"][0]["field"] == "spec.maxReplicas"
    assert api.patch(hpa, {"spec": {"maxReplicas": 8}}, MERGE).json()["spec"]["maxReplicas"] == 8
    with pytest.raises(ValueError, match="must be less than or equal to cpu limit"):
        cluster.add_deployment(
            "bad",
            containers=[
                {
                    "name": "main",
                    "image": "x:1",
                    "resources": {"requests": {"cpu": "2"}, "limits": {"cpu": "1"}},
                }
            ],
        )


def test_lists_page_with_limit_and_continue(cluster: KubeCluster, api) -> None:
    for name in ("a", "b", "c"):
        cluster.add_deployment(name)
    first = api.get(DEPLOYMENTS, params={"limit": "2"}).json()
    assert [item["metadata"]["name"] for item in first["items"]] == ["a", "b"]
    assert first["metadata"]["remainingItemCount"] == 1
    rest = api.get(DEPLOYMENTS, params={"limit": "2", "continue": first["metadata"]["continue"]}).json()
    assert [item["metadata"]["name"] for item in rest["items"]] == ["c"]
    assert "continue" not in rest["metadata"]


def test_a_selector_watch_sees_objects_enter_and_leave_the_selection(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    since = cluster.get("deployment", "web")["metadata"]["resourceVersion"]
    api.patch(WEB, {"metadata": {"labels": {"tuned": "yes"}}}, MERGE)
    api.patch(WEB, {"spec": {"replicas": 3}}, MERGE)
    api.patch(WEB, {"metadata": {"labels": {"tuned": None}}}, MERGE)
    params = {"watch": "true", "resourceVersion": since, "timeoutSeconds": "1", "labelSelector": "tuned=yes"}
    stream = api.get(DEPLOYMENTS, params=params, stream=True)
    kinds = [json.loads(line)["type"] for line in stream.iter_lines() if line]
    assert kinds == ["ADDED", "MODIFIED", "DELETED"]


def test_a_watch_from_a_version_older_than_the_history_gets_410(tmp_path) -> None:
    cluster = KubeCluster.start(tmp_path, watch_history=5)
    try:
        cluster.add_deployment("web")  # the deployment, its ReplicaSet, pods and events: more than 5 changes
        stream = requests.get(
            cluster.url + DEPLOYMENTS,
            params={"watch": "true", "resourceVersion": "1"},
            headers={"Authorization": f"Bearer {cluster.token}"},
            stream=True,
            timeout=HANG_BOUND,
        )
        events = [json.loads(line) for line in stream.iter_lines() if line]
        assert [(event["type"], event["object"]["code"], event["object"]["reason"]) for event in events] == [
            ("ERROR", 410, "Expired")
        ]
    finally:
        cluster.stop()


def test_the_scale_subresource_reads_and_writes_replicas(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", replicas=2)
    scale = api.get(f"{WEB}/scale").json()
    assert (scale["kind"], scale["apiVersion"]) == ("Scale", "autoscaling/v1")
    assert scale["spec"] == {"replicas": 2}
    assert scale["status"] == {"replicas": 2, "selector": "app=web"}
    patched = api.patch(f"{WEB}/scale", {"spec": {"replicas": 4}}, MERGE).json()
    assert patched["spec"]["replicas"] == 4
    assert cluster.get("deployment", "web")["spec"]["replicas"] == 4
    stale = api.patch(
        f"{WEB}/scale",
        {"metadata": {"resourceVersion": scale["metadata"]["resourceVersion"]}, "spec": {"replicas": 1}},
        MERGE,
    )
    assert stale.status_code == 409


def test_restricted_to_the_deploy_role_only_its_verbs_are_allowed(cluster: KubeCluster, api) -> None:
    from pathlib import Path

    cluster.add_deployment("web")
    cluster.add_hpa("web", "web")
    cluster.set_metrics("web")
    role = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes" / "role.yaml"
    cluster.restrict_to_role(role)
    assert api.patch(WEB, {"spec": {"replicas": 3}}, MERGE).status_code == 200
    assert api.get("/api/v1/namespaces/default/events").status_code == 200
    assert api.get("/apis/metrics.k8s.io/v1beta1/namespaces/default/pods").status_code == 200
    scale = api.patch(f"{WEB}/scale", {"spec": {"replicas": 1}}, MERGE)
    assert scale.status_code == 403
    assert 'cannot patch resource "deployments" subresource "scale"' in scale.json()["message"]
    assert api.request("DELETE", WEB).status_code == 403
    pod = cluster.pods("web")[0]["metadata"]["name"]
    assert (
        api.patch(
            f"/api/v1/namespaces/default/pods/{pod}", {"metadata": {"labels": {"x": "y"}}}, MERGE
        ).status_code
        == 403
    )
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SelfSubjectAccessReview",
        "spec": {
            "resourceAttributes": {
                "namespace": "default",
                "verb": "patch",
                "group": "apps",
                "resource": "deployments",
                "subresource": "scale",
            }
        },
    }
    answer = api.request("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", json=review).json()
    assert answer["status"]["allowed"] is False
    cluster.restrict_to_role(None)
    assert api.request("DELETE", WEB).status_code == 200


def test_namespaces_are_readable(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web", namespace="shop")
    listed = api.get("/api/v1/namespaces").json()
    assert listed["kind"] == "NamespaceList"
    assert {"default", "kube-system", "shop"} <= {item["metadata"]["name"] for item in listed["items"]}
    assert api.get("/api/v1/namespaces/shop").json()["status"] == {"phase": "Active"}
    missing = api.get("/api/v1/namespaces/nowhere")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"


def test_the_metrics_api_group_is_discoverable_only_once_installed(cluster: KubeCluster, api) -> None:
    def groups() -> set[str]:
        return {group["name"] for group in api.get("/apis").json()["groups"]}

    assert "metrics.k8s.io" not in groups()
    assert api.get("/apis/metrics.k8s.io/v1beta1").status_code == 404
    assert "apps" in groups()
    cluster.set_metrics("web")
    assert "metrics.k8s.io" in groups()
    resources = api.get("/apis/metrics.k8s.io/v1beta1").json()["resources"]
    assert {(item["name"], item["kind"]) for item in resources} >= {("pods", "PodMetrics")}


def test_events_and_pods_filter_on_their_own_field_selectors(cluster: KubeCluster, api) -> None:
    cluster.add_deployment("web")
    pod = cluster.pods("web")[0]["metadata"]["name"]
    about_pod = api.get(
        "/api/v1/namespaces/default/events",
        params={"fieldSelector": f"involvedObject.name={pod},involvedObject.kind=Pod"},
    ).json()
    assert about_pod["items"] and {event["involvedObject"]["name"] for event in about_pod["items"]} == {pod}
    normal = api.get("/api/v1/namespaces/default/events", params={"fieldSelector": "type=Warning"}).json()
    assert normal["items"] == []
    running = api.get(
        "/api/v1/namespaces/default/pods", params={"fieldSelector": "status.phase=Running"}
    ).json()
    assert len(running["items"]) == 2
    refused = api.get(DEPLOYMENTS, params={"fieldSelector": "spec.replicas=2"})
    assert (
        refused.status_code == 400
        and 'field label not supported: "spec.replicas"' in refused.json()["message"]
    )
