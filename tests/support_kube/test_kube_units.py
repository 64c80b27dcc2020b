"""The emulator's pure parts: strategic merge directives, merge keys, quantities, selectors."""

from __future__ import annotations

import kube_patching
import kube_quantity
import kube_selectors
import pytest

TEMPLATE = ("spec", "template", "spec")


@pytest.mark.parametrize(
    ("path", "key"),
    [
        (TEMPLATE + ("containers",), "name"),
        (("spec", "containers"), "name"),
        (TEMPLATE + ("containers", "*", "env"), "name"),
        (TEMPLATE + ("containers", "*", "ports"), "containerPort"),
        (TEMPLATE + ("containers", "*", "volumeMounts"), "mountPath"),
        (TEMPLATE + ("volumes",), "name"),
        (("status", "conditions"), "type"),
        (("spec", "metrics"), None),  # autoscaling/v2 metrics are atomic: replaced
        (TEMPLATE + ("containers", "*", "args"), None),
        (TEMPLATE + ("tolerations",), None),
    ],
)
def test_merge_keys_follow_the_api_types(path: tuple[str, ...], key: str | None) -> None:
    assert kube_patching.merge_key(path) == key


def test_strategic_merge_directives() -> None:
    original = {
        "spec": {
            "template": {
                "spec": {
                    "containers": [
                        {"name": "a", "image": "a:1", "env": [{"name": "X", "value": "1"}]},
                        {"name": "b", "image": "b:1"},
                    ]
                }
            }
        }
    }
    replaced = kube_patching.strategic_merge(
        original,
        {
            "spec": {
                "template": {"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "c:1"}]}}
            }
        },
    )
    assert replaced["spec"]["template"]["spec"]["containers"] == [{"name": "c", "image": "c:1"}]
    deleted = kube_patching.strategic_merge(
        original, {"spec": {"template": {"spec": {"containers": [{"name": "a", "$patch": "delete"}]}}}}
    )
    assert [c["name"] for c in deleted["spec"]["template"]["spec"]["containers"]] == ["b"]
    ordered = kube_patching.strategic_merge(
        original,
        {
            "spec": {
                "template": {
                    "spec": {
                        "$setElementOrder/containers": [{"name": "b"}, {"name": "a"}],
                        "containers": [{"name": "a", "image": "a:2"}],
                    }
                }
            }
        },
    )
    assert [(c["name"], c["image"]) for c in ordered["spec"]["template"]["spec"]["containers"]] == [
        ("b", "b:1"),
        ("a", "a:2"),
    ]
    retained = kube_patching.strategic_merge(
        {"spec": {"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}}}},
        {"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}},
    )
    assert retained["spec"]["strategy"] == {"type": "Recreate"}
    assert original["spec"]["template"]["spec"]["containers"][0]["image"] == "a:1"  # not mutated
    with pytest.raises(kube_patching.PatchError):
        kube_patching.strategic_merge(
            original, {"spec": {"template": {"spec": {"containers": [{"image": "x"}]}}}}
        )


def test_merge_patch_is_rfc_7386() -> None:
    assert kube_patching.merge_patch({"a": {"b": 1, "c": 2}, "l": [1, 2]}, {"a": {"b": None}, "l": [3]}) == {
        "a": {"c": 2},
        "l": [3],
    }
    assert kube_patching.merge_patch({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("0.5", "500m"),
        ("1000m", "1"),
        ("1500m", "1500m"),
        ("2000", "2k"),
        ("100m", "100m"),
        ("1", "1"),
        ("1024Mi", "1Gi"),
        ("1536Mi", "1536Mi"),
        ("1.5Gi", "1536Mi"),
        ("0.5Ki", "512"),
        ("128974848", "128974848"),
        ("129e6", "129e6"),
        ("1e3", "1e3"),
        ("0", "0"),
        ("0.0001", "100u"),
        (2, "2"),
        ("4Gi", "4Gi"),
    ],
)
def test_quantities_render_as_the_api_server_renders_them(given: str, stored: str) -> None:
    assert kube_quantity.canonical(given) == stored


@pytest.mark.parametrize("bad", ["", "lots", "1.2.3", "5 Gi", "1Kb", "m"])
def test_malformed_quantities_are_refused(bad: str) -> None:
    with pytest.raises(kube_quantity.QuantityError):
        kube_quantity.canonical(bad)


def test_selectors() -> None:
    web = {"metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "front"}}}
    assert kube_selectors.label_matcher("app=web,tier in (front, back)")(web)
    assert kube_selectors.label_matcher("app==web,!missing")(web)
    assert not kube_selectors.label_matcher("tier notin (front)")(web)
    assert kube_selectors.field_matcher("metadata.name=web,metadata.namespace!=kube-system")(web)
    with pytest.raises(kube_selectors.SelectorError):
        kube_selectors.field_matcher("spec.replicas=2")
