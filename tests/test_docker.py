"""docker/: what can be checked without Docker's engine (none runs on these machines).

The compose file is parsed and interpolated as compose would; the Dockerfile is read as
text; the alert rules and the Grafana dashboard are checked against the metric names a
real /metrics answer carries. Building the image and starting the stack stay unverified.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import click
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.runtime.cli import main
from tasks.backlog import measure_backlog

DOCKER = Path(__file__).resolve().parent.parent / "docker"
ROLES = {"api", "worker", "beat", "flower"}
REQUIRED = {"TIDINGS_ADMIN_KEY", "TIDINGS_SECRET_KEY", "FLOWER_BASIC_AUTH", "METRICS_TOKEN"}
VARIABLE = re.compile(r"\$\{(?P<name>[A-Z0-9_]+)(?:(?P<op>:-|:\?)(?P<arg>[^}]*))?\}")


def interpolate(node, env: dict[str, str], missing: set[str]):
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?error}, over the whole parsed file."""
    if isinstance(node, dict):
        return {key: interpolate(value, env, missing) for key, value in node.items()}
    if isinstance(node, list):
        return [interpolate(value, env, missing) for value in node]
    if not isinstance(node, str):
        return node

    def replace(match: re.Match) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        if env.get(name):
            return env[name]
        if op == ":?":
            missing.add(name)
            return f"<{name}>"
        return arg if op == ":-" else ""

    return VARIABLE.sub(replace, node)


@pytest.fixture(scope="module")
def raw() -> dict:
    return yaml.safe_load((DOCKER / "compose.yaml").read_text())


@pytest.fixture(scope="module")
def services(raw) -> dict:
    missing: set[str] = set()
    compose = interpolate(raw, {}, missing)
    assert missing == REQUIRED  # compose refuses to start without them, naming each
    return compose["services"]


def cli_command(args: list[str]) -> click.Command:
    """The `tidings` (sub)command a container's command runs, as the ENTRYPOINT makes it."""
    command: click.Command = main
    for word in args:
        if not isinstance(command, click.Group) or word not in command.commands:
            break
        command = command.commands[word]
    assert command is not main, args
    return command


def test_every_role_runs_its_cli_command(services):
    assert set(services) >= {"postgres", "redis", "migrate", *ROLES, "prometheus", "grafana"}
    assert services["migrate"]["command"] == ["db", "upgrade"]
    assert cli_command(["db", "upgrade"]).name == "upgrade"
    for role in ROLES:
        assert services[role]["command"][0] == role
        assert cli_command(services[role]["command"]).name == role
        assert services[role]["image"] == services["migrate"]["image"] == "tidings:latest"
    transactional = services["worker-transactional"]
    assert transactional["command"][:2] == ["worker", "--transactional"]
    assert "--transactional" in [option.opts[0] for option in cli_command(transactional["command"]).params]
    for name in ("worker", "worker-transactional"):
        worker = services[name]["command"]
        assert worker[worker.index("--pool") + 1] == "prefork"  # autoscaling needs prefork
        maximum, minimum = map(int, worker[worker.index("--autoscale") + 1].split(","))
        assert maximum > minimum >= 1


def test_health_checks_use_real_commands(services):
    for name in (
        "postgres",
        "redis",
        "api",
        "worker",
        "worker-transactional",
        "beat",
        "flower",
        "prometheus",
        "grafana",
    ):
        assert services[name]["healthcheck"]["test"][0] == "CMD", name
    for name in ("worker", "worker-transactional", "beat"):
        test = services[name]["healthcheck"]["test"]
        assert test[1] == "tidings"
        assert cli_command(test[2:]).name == services[name]["command"][0]
    assert "/readyz" in " ".join(services["api"]["healthcheck"]["test"])
    assert "/healthcheck" in " ".join(services["flower"]["healthcheck"]["test"])


def test_migrations_run_once_before_anything_that_uses_the_schema(services):
    assert services["migrate"]["restart"] == "no"
    assert services["migrate"]["depends_on"] == {"postgres": {"condition": "service_healthy"}}
    for role in ROLES:
        assert services[role]["depends_on"] == {
            "migrate": {"condition": "service_completed_successfully"},
            "redis": {"condition": "service_healthy"},
        }
    assert services["prometheus"]["depends_on"] == {"api": {"condition": "service_healthy"}}

    def order(name: str, seen: tuple[str, ...] = ()) -> list[str]:
        assert name not in seen, f"dependency cycle through {name}"
        deps = services[name].get("depends_on", {})
        return [step for dep in deps for step in order(dep, (*seen, name))] + [name]

    for role in ROLES:
        path = order(role)
        assert path.index("postgres") < path.index("migrate") < path.index(role)


def test_redis_keeps_the_queues_and_postgres_its_data(services, raw):
    redis_command = services["redis"]["command"]
    assert redis_command[redis_command.index("--appendonly") + 1] == "yes"
    assert redis_command[redis_command.index("--maxmemory-policy") + 1] == "noeviction"
    assert "redis-data:/data" in services["redis"]["volumes"]
    assert "postgres-data:/var/lib/postgresql/data" in services["postgres"]["volumes"]
    assert {"postgres-data", "redis-data"} <= set(raw["volumes"])
    assert services["flower"]["environment"]["FLOWER_BASIC_AUTH"] == "<FLOWER_BASIC_AUTH>"
    for service in services.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:"), port


def test_no_secret_is_baked_into_the_image():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    for line in dockerfile.splitlines():
        if line.split(" ", 1)[0] in ("ENV", "ARG") or line.startswith("    "):
            assert not re.search(r"KEY|SECRET|PASSWORD|TOKEN", line.split("#")[0]), line
    ignored = (DOCKER.parent / ".dockerignore").read_text().split()
    assert {"var", "**/.env"} <= set(ignored)  # var/ holds make run's dev keys


def test_the_image_is_multi_stage_slim_non_root_with_the_cli_as_entrypoint():
    dockerfile = (DOCKER / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+)", dockerfile, re.MULTILINE)
    assert len(stages) == 2 and all(stage.endswith("-slim") or stage.startswith("python:3.11-slim") for stage in stages)
    final = dockerfile.split("\nFROM ")[-1]
    assert re.search(r"^USER 10001:10001$", final, re.MULTILINE)
    assert json.loads(re.search(r"^ENTRYPOINT (.+)$", final, re.MULTILINE).group(1)) == ["tidings"]
    assert cli_command(json.loads(re.search(r"^CMD (.+)$", final, re.MULTILINE).group(1))).name == "api"
    roles = re.search(r"the `tidings` CLI is the entrypoint:\n#\s+(.+)", dockerfile).group(1)
    for role in roles.replace("...", "").split("|"):
        assert cli_command(role.split()), role


@pytest.fixture
def exported(client) -> set[str]:
    measure_backlog()
    body = client.get("/metrics").get_data(as_text=True)
    names = set()
    for family in text_string_to_metric_families(body):
        names.add(family.name)
        names.update(sample.name for sample in family.samples)
        if family.type == "counter":
            names.add(family.name + "_total")
        if family.type == "histogram":
            names.update(family.name + suffix for suffix in ("_bucket", "_sum", "_count"))
    return names


def test_alert_rules_and_dashboard_name_only_exported_metrics(exported):
    rules = yaml.safe_load((DOCKER / "prometheus" / "alerts.yml").read_text())["groups"][0]["rules"]
    alerts = {rule["alert"] for rule in rules}
    assert {"TidingsMessagesStuck", "TidingsDeadLettersGrowing", "TidingsProviderPaused"} <= alerts
    assert "TidingsCircuitBreakerOpen" in alerts
    dashboard = json.loads((DOCKER / "grafana" / "dashboards" / "tidings.json").read_text())
    expressions = [rule["expr"] for rule in rules]
    expressions += [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]
    for expression in expressions:
        for name in re.findall(r"tidings_[a-z_]+", expression):
            assert name in exported, (name, expression)
    scrape = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["static_configs"][0]["targets"] == ["api:8000"]


def test_prometheus_scrapes_with_the_token_the_api_asks_for(services, raw):
    """compose hands METRICS_TOKEN to the API as a setting and to Prometheus as a secret file,
    which its scrape config sends as the bearer token."""
    assert services["api"]["environment"]["METRICS_TOKEN"] == "<METRICS_TOKEN>"
    assert raw["secrets"]["metrics_token"] == {"environment": "METRICS_TOKEN"}
    assert services["prometheus"]["secrets"] == ["metrics_token"]
    scrape = yaml.safe_load((DOCKER / "prometheus" / "prometheus.yml").read_text())["scrape_configs"][0]
    assert scrape["authorization"] == {"type": "Bearer", "credentials_file": "/run/secrets/metrics_token"}
