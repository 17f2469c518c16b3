"""Issue 21.4: each function's CPU, memory and request concurrency are a choice made from bench 8
(bench/README.md, "8. Platform"), written once in env_spec.json and deployed the same way by both
paths (Terraform reads the spec; cloudbuild-gcloud.yaml gets --cpu/--memory/--concurrency from
infra/env_spec.py; test_env_parity.py compares what each deploys)."""

from __future__ import annotations

import copy
import json
import re

from .support import INFRA, MODULE, ROOT, resources
from .test_env_parity import env_spec

SPEC = json.loads((MODULE / "env_spec.json").read_text(encoding="utf-8"))
SCHEMA = INFRA / "schema" / "google-provider-snapshot.json"
README_ROW = re.compile(r"^\| `(\w+)` \| ([0-9.]+) \| (\d+Mi) \| (\d+) \|", re.M)


def test_every_function_takes_cpu_memory_and_concurrency_from_the_spec():
    functions = resources("google_cloudfunctions2_function")
    assert sorted(b.name for b in functions) == sorted(SPEC["functions"])
    for block in functions:
        service = block.blocks("service_config")[0]
        spec = f"local.env_spec.deploy.{block.name}"
        assert service["available_cpu"] == f"${{{spec}.cpu}}", block.address
        assert service["available_memory"] == f"${{{spec}.memory}}", block.address
        assert service["max_instance_request_concurrency"] == f"${{{spec}.concurrency}}", block.address


def test_the_gcloud_path_deploys_the_rendered_platform_flags(tmp_path):
    text = (ROOT / "cloudbuild-gcloud.yaml").read_text(encoding="utf-8")
    assert "--concurrency=1" not in text and "--memory=512Mi" not in text, "no hard-coded platform flags"
    assert 'read -ra platform <<< "$$(cat "deploy-config/$$f.platform")"' in text
    assert '"$${platform[@]}"' in text
    module = env_spec()
    rendered = module.Rendered(
        values={},
        env={"send": {}},
        secrets={"send": {}},
        ingress={"send": "ALLOW_ALL"},
        timeout_s={"send": 60},
        invokers={"send": []},
        platform={"send": ("1", "1Gi", 8)},
        jobs_collection="ai_jobs",
        enabled={"send": True},
        urls={"send": "https://send.example"},
        secret_files={"send": {}},
        direct_vpc={},
    )
    module.write_gcloud_files(rendered, tmp_path)
    assert (tmp_path / "send.platform").read_text() == "--cpu=1 --memory=1Gi --concurrency=8"


def test_the_spec_refuses_what_cloud_functions_refuses():
    module = env_spec()
    assert module.validate(SPEC) == []
    bad = copy.deepcopy(SPEC)
    bad["deploy"]["status"].update(cpu="0.333", concurrency=4)
    assert any("concurrency 4 needs cpu >= 1" in e for e in module.validate(bad))
    bad = copy.deepcopy(SPEC)
    bad["deploy"]["send"]["cpu"] = "0.5"
    assert any("deploy.send.cpu" in e for e in module.validate(bad))
    bad = copy.deepcopy(SPEC)
    del bad["deploy"]["reconcile"]["memory"]
    assert any("deploy.reconcile" in e for e in module.validate(bad))


def test_the_bench_readme_states_the_choice_the_spec_deploys():
    rows = {
        fn: (cpu, memory, int(concurrency))
        for fn, cpu, memory, concurrency in README_ROW.findall((ROOT / "bench" / "README.md").read_text("utf-8"))
    }
    deployed = {fn: (d["cpu"], d["memory"], d["concurrency"]) for fn, d in SPEC["deploy"].items()}
    assert rows == deployed


def test_startup_cpu_boost_is_not_in_the_pinned_provider_so_the_readme_says_why():
    """google_cloudfunctions2_function (provider snapshot) has no startup CPU boost argument; when a
    provider adds one this fails, and the choice should use it."""
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    service = schema["resources"]["google_cloudfunctions2_function"]["blocks"]["service_config"]
    assert "available_cpu" in service["arguments"]
    assert not [a for a in service["arguments"] if "boost" in a]
    assert "startup cpu boost" in (ROOT / "bench" / "README.md").read_text("utf-8").lower()
