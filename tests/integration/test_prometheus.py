"""Metrics as an operator gets them: a real Prometheus (the Debian package, which scripts/test
installs) scrapes every replica and agent of a dev cluster listed by `dev up --json`'s
"metrics", after a job ran; every exposition passes `promtool check metrics`; the alert rules
pass `promtool check rules` and evaluate without error on the live data; every query of the
Grafana dashboard evaluates, and every metric it or the rules name is one the processes
declare. Summing a state figure over the replicas counts it once (the leader alone exports
it)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support import paths
from tests.support.cluster import free_port
from tests.support.waiting import wait_until

pytestmark = pytest.mark.integration

PROMETHEUS = shutil.which("prometheus")
PROMTOOL = shutil.which("promtool")
MISSING = ("prometheus/promtool not installed: scripts/test installs the Debian package "
           "'prometheus' when run as root (apt-get install prometheus)")
DEPLOY = paths.REPO / "deploy"
RULES = DEPLOY / "prometheus" / "alerts.yml"
DASHBOARD = DEPLOY / "grafana" / "raftsched-dashboard.json"
UP_TIMEOUT_S = 90
WATCH_TIMEOUT_S = 120
SCRAPE_TIMEOUT_S = 60
HTTP_TIMEOUT_S = 10
STOP_TIMEOUT_S = 15
METRIC = re.compile(r"\b(raftsched_[a-z_]+)")
SUFFIXES = ("_bucket", "_count", "_sum", "_total")


def raftsched(dev_dir: Path, *argv: str, timeout_s: float = 60) -> Any:
    env = {key: value for key, value in os.environ.items()
           if key != "RAFTSCHED_SERVERS" and not key.startswith("RAFTSCHED_TLS_")}
    env["RAFTSCHED_DEV_DIR"] = str(dev_dir)
    result = subprocess.run([sys.executable, "-m", "raftsched", *argv], capture_output=True,
                            text=True, timeout=timeout_s, env=env, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(result.stdout)


def fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_S) as response:
        body: bytes = response.read()
    return body.decode()


def api(base: str, path: str, **query: str) -> Any:
    url = f"{base}/api/v1/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    reply = json.loads(fetch(url))
    assert reply["status"] == "success", reply
    return reply["data"]


def family(name: str) -> str:
    for suffix in SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def declared(exposition: str) -> set[str]:
    return {family(line.split()[2]) for line in exposition.splitlines()
            if line.startswith("# TYPE ")}


def named_in_rules_and_dashboard() -> set[str]:
    text = RULES.read_text() + json.dumps([target["expr"] for panel in
                                           json.loads(DASHBOARD.read_text())["panels"]
                                           for target in panel["targets"]])
    return {family(name) for name in METRIC.findall(text)}


@pytest.mark.skipif(PROMTOOL is None, reason=MISSING)
def test_the_shipped_rules_and_configuration_pass_promtool() -> None:
    assert PROMTOOL is not None
    rules = subprocess.run([PROMTOOL, "check", "rules", str(RULES)], capture_output=True,
                           text=True, timeout=60, check=False)
    assert rules.returncode == 0, rules.stdout + rules.stderr
    assert "SUCCESS" in rules.stdout
    config = subprocess.run([PROMTOOL, "check", "config", "prometheus.yml"],
                            cwd=DEPLOY / "prometheus", capture_output=True, text=True,
                            timeout=60, check=False)
    assert config.returncode == 0, config.stdout + config.stderr


@pytest.mark.skipif(PROMETHEUS is None or PROMTOOL is None, reason=MISSING)
def test_a_real_prometheus_scrapes_every_replica_and_agent(tmp_path: Path) -> None:
    assert PROMETHEUS is not None and PROMTOOL is not None
    dev_dir = tmp_path / "dev"
    prometheus: subprocess.Popen[bytes] | None = None
    try:
        cluster = raftsched(dev_dir, "dev", "up", "--dir", str(dev_dir), "--executor", "mock",
                            "--json", timeout_s=UP_TIMEOUT_S)
        urls = cluster["metrics"]
        assert len(urls) == len(cluster["replicas"]) + len(cluster["agents"]) == 5
        done = raftsched(dev_dir, "submit", str(paths.EXAMPLES / "demo.yaml"), "--watch",
                         "--json", timeout_s=WATCH_TIMEOUT_S)
        assert done["state"] == "SUCCEEDED", done
        tasks = sum(done["tasks"].values())

        families: set[str] = set()
        for url in urls:
            text = fetch(url)
            lint = subprocess.run([PROMTOOL, "check", "metrics"], input=text,
                                  capture_output=True, text=True, timeout=60, check=False)
            assert lint.returncode == 0, f"{url}: {lint.stdout}{lint.stderr}"
            families |= declared(text)
        missing = named_in_rules_and_dashboard() - families
        assert not missing, f"rules or dashboard name metrics nobody exports: {sorted(missing)}"

        port = free_port()
        base = f"http://127.0.0.1:{port}"
        shutil.copy(RULES, tmp_path / "alerts.yml")
        targets = [urllib.parse.urlsplit(url).netloc for url in urls]
        (tmp_path / "prometheus.yml").write_text(json.dumps({  # JSON is YAML
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": ["alerts.yml"],
            "scrape_configs": [{"job_name": "raftsched",
                                "static_configs": [{"targets": targets}]}]}))
        log = (tmp_path / "prometheus.log").open("wb")
        prometheus = subprocess.Popen(
            [PROMETHEUS, f"--config.file={tmp_path / 'prometheus.yml'}",
             f"--storage.tsdb.path={tmp_path / 'tsdb'}", f"--web.listen-address=127.0.0.1:{port}",
             "--log.level=warn"], stdout=log, stderr=subprocess.STDOUT)

        def all_up() -> bool:
            if prometheus is not None and prometheus.poll() is not None:
                raise AssertionError((tmp_path / "prometheus.log").read_text())
            active = api(base, "targets")["activeTargets"]
            return len(active) == 5 and all(t["health"] == "up" for t in active)

        wait_until(all_up, "Prometheus to scrape all 5 targets", SCRAPE_TIMEOUT_S,
                   retry_on=(OSError, ValueError))

        def value(query: str) -> float | None:
            result = api(base, "query", query=query)["result"]
            return float(result[0]["value"][1]) if result else None

        # The state's figures come once, from the leader: summing over replicas adds nothing.
        assert wait_until(lambda: value('sum(raftsched_replica_leader{job="raftsched"})') == 1,
                          "one leader in Prometheus", SCRAPE_TIMEOUT_S)
        assert value('count(raftsched_live_jobs{job="raftsched"})') == 1
        assert value('sum(raftsched_placements_total{job="raftsched"})') >= tasks
        assert value('sum(raftsched_reports_total{job="raftsched", verdict="accepted"})') \
            >= 2 * tasks
        assert value('sum(raftsched_agent_attempts_started_total{job="raftsched"})') >= tasks
        assert value('sum(raftsched_cluster_capacity{job="raftsched", resource="cpu"})') > 0

        for panel in json.loads(DASHBOARD.read_text())["panels"]:
            for target in panel["targets"]:
                api(base, "query", query=target["expr"])  # evaluates, or the API says why

        def rules_evaluated() -> list[dict[str, Any]] | None:
            rules = [rule for group in api(base, "rules")["groups"] for rule in group["rules"]]
            return rules if rules and all(r.get("lastEvaluation", "").startswith("2")
                                          and not r["lastEvaluation"].startswith("0001")
                                          for r in rules) else None

        rules = wait_until(rules_evaluated, "every alert rule evaluated", SCRAPE_TIMEOUT_S)
        assert all(rule["health"] == "ok" for rule in rules), rules

        def quiet() -> bool:
            # An evaluation from before every target was scraped may have left "pending": the
            # next ones, on the full data, must clear it (a rule stuck pending or firing fails).
            states = {rule["name"]: rule["state"] for group in api(base, "rules")["groups"]
                      for rule in group["rules"]}
            return states["RaftschedNoLeader"] == states["RaftschedReplicaDown"] == "inactive"

        wait_until(quiet, "no-leader and replica-down alerts inactive", SCRAPE_TIMEOUT_S,
                   retry_on=(OSError, ValueError))
    finally:
        if prometheus is not None:
            prometheus.terminate()
            try:
                prometheus.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                prometheus.kill()
                prometheus.wait(STOP_TIMEOUT_S)
        subprocess.run([sys.executable, "-m", "raftsched", "dev", "down", "--dir", str(dev_dir)],
                       capture_output=True, timeout=120, check=False,
                       env={**os.environ, "RAFTSCHED_DEV_DIR": str(dev_dir)})
