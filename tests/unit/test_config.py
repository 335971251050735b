"""The deployment settings (hangar/config.py): defaults, parsing, and every way a value is refused, with the
message naming the variable and what it allows."""

from __future__ import annotations

import os

import pytest

from hangar.config import Settings, SettingsError, env_names, load, unknown_variables


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in list(os.environ):
        if name.startswith("HANGAR_"):
            monkeypatch.delenv(name)


def with_env(monkeypatch: pytest.MonkeyPatch, **env: str) -> Settings:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return load()


def test_defaults_are_the_documented_ones() -> None:
    s = load()
    assert s.namespace == "default" and s.watch_namespaces == ("default",) and not s.watch_all
    assert s.database_url == "sqlite:///hangar.db"
    assert (s.gateway_port, s.operator_port, s.api_port) == (7443, 8080, 8000)
    assert s.gateway_address == "" and s.gateway_host == "0.0.0.0" and s.operator_host == "0.0.0.0"
    assert s.approvals is None and s.approval_timeout == 600 and s.max_sandboxes == 10
    assert s.runtime_class is None and s.storage_class is None and s.sandbox_service_account is None
    assert s.workspace_size == "10Gi" and s.interrupt_grace == 10.0 and s.connect_timeout == 300.0
    assert s.driver_image == "ghcr.io/hangar-dev/hangar-sandbox:0.1.0"
    assert s.cli_path == "/opt/hangar/clis/node_modules/.bin"
    assert s.governance == "off" and s.governance_modes == {} and not s.governance_on
    assert s.governance_suspend_after == 60 and s.idle_suspend_after == 900
    assert s.log_level == "info" and s.log_format == "json"
    assert s.api_tokens_file is None and s.admin_token is None and s.admin_subject == "admin"


def test_every_field_has_its_own_hangar_variable() -> None:
    names = env_names()
    assert set(names) == set(Settings.model_fields)
    assert all(v.startswith("HANGAR_") for v in names.values())
    assert len(set(names.values())) == len(names)


def test_values_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    s = with_env(
        monkeypatch,
        HANGAR_NAMESPACE="hangar",
        HANGAR_WATCH_NAMESPACES="team-a, team-b,team-a,",
        HANGAR_APPROVALS="deny-risky",
        HANGAR_APPROVAL_TIMEOUT_SECONDS="90",
        HANGAR_MAX_SANDBOXES="3",
        HANGAR_SANDBOX_SERVICE_ACCOUNT="hangar-sandbox",
        HANGAR_SANDBOX_RUNTIME_CLASS="gvisor",
        HANGAR_INTERRUPT_GRACE_SECONDS="2.5",
        HANGAR_IDLE_SUSPEND_SECONDS="0",
        HANGAR_LOG_LEVEL="WARNING",
        HANGAR_MCP_ALLOWED_HOSTS="hangar.example.com,127.0.0.1:*",
        HANGAR_OPERATOR_HOST="127.0.0.1",
    )
    assert s.namespace == "hangar" and s.watch_namespaces == ("team-a", "team-b")
    assert s.approvals == "deny-risky" and s.approval_timeout == 90 and s.max_sandboxes == 3
    assert s.sandbox_service_account == "hangar-sandbox" and s.runtime_class == "gvisor"
    assert s.interrupt_grace == 2.5 and s.idle_suspend_after == 0 and s.log_level == "warning"
    assert s.mcp_allowed_hosts == ("hangar.example.com", "127.0.0.1:*") and s.operator_host == "127.0.0.1"


def test_empty_means_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    # The chart renders optional values as "".
    s = with_env(
        monkeypatch,
        HANGAR_SANDBOX_RUNTIME_CLASS="",
        HANGAR_APPROVAL_TIMEOUT_SECONDS="",
        HANGAR_GOVERNANCE_MODES="",
        HANGAR_WATCH_NAMESPACES="",
        HANGAR_NAMESPACE="ns1",
    )
    assert s.runtime_class is None and s.approval_timeout == 600 and s.governance_modes == {}
    assert s.watch_namespaces == ("ns1",)


def test_every_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    s = with_env(monkeypatch, HANGAR_WATCH_NAMESPACES="*")
    assert s.watch_all and s.watch_namespaces == ("*",)


def test_code_may_pass_values_by_field_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HANGAR_NAMESPACE", "from-env")
    s = Settings(namespace="given", database_url="sqlite:///x.db")
    assert s.namespace == "given" and s.watch_namespaces == ("given",)
    assert Settings(watch_namespaces=("a", "b")).watch_namespaces == ("a", "b")
    assert load(max_sandboxes=2).max_sandboxes == 2
    with pytest.raises(Exception, match="frozen"):
        s.namespace = "other"  # type: ignore[misc]


def test_a_lower_case_variable_is_not_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    assert with_env(monkeypatch, hangar_approvals="ask").approvals is None


def test_governance_modes_per_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    s = with_env(
        monkeypatch,
        HANGAR_GOVERNANCE_MODES="approval=enforce, run=shadow",
        HANGAR_GOVERNANCE_WEBHOOK_SECRET="tower-webhook",
    )
    assert s.governance == "off" and s.governance_on
    assert s.governance_mode("approval") == "enforce" and s.governance_mode("run") == "shadow"
    s = with_env(monkeypatch, HANGAR_GOVERNANCE="shadow", HANGAR_GOVERNANCE_MODES="run=off")
    assert s.governance_mode("approval") == "shadow" and s.governance_mode("run") == "off"
    s = with_env(monkeypatch, HANGAR_GOVERNANCE="off", HANGAR_GOVERNANCE_MODES="approval=off")
    assert not s.governance_on
    s = with_env(
        monkeypatch, HANGAR_GOVERNANCE="enforce", HANGAR_GOVERNANCE_MODES="", HANGAR_APPROVALS="governed"
    )
    assert s.approvals == "governed" and s.governance_webhook_secret is not None
    assert s.governance_webhook_secret == "tower-webhook"
    # It names a Secret, it is none: the signing secret itself is read from the apiserver, never the env.


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"HANGAR_APPROVALS": "deny_risky"},
            "HANGAR_APPROVALS='deny_risky': Input should be 'auto', 'ask', 'deny-risky' or 'governed'",
        ),
        (
            {"HANGAR_APPROVAL_TIMEOUT_SECONDS": "ten"},
            "HANGAR_APPROVAL_TIMEOUT_SECONDS='ten': Input should be",
        ),
        (
            {"HANGAR_APPROVAL_TIMEOUT_SECONDS": "0"},
            "HANGAR_APPROVAL_TIMEOUT_SECONDS='0': Input should be greater",
        ),
        ({"HANGAR_INTERRUPT_GRACE_SECONDS": "soon"}, "HANGAR_INTERRUPT_GRACE_SECONDS='soon'"),
        ({"HANGAR_CONNECT_TIMEOUT_SECONDS": "-1"}, "HANGAR_CONNECT_TIMEOUT_SECONDS='-1'"),
        (
            {"HANGAR_MAX_SANDBOXES": "0"},
            "HANGAR_MAX_SANDBOXES='0': Input should be greater than or equal to 1",
        ),
        ({"HANGAR_GATEWAY_PORT": "70000"}, "HANGAR_GATEWAY_PORT='70000'"),
        ({"HANGAR_IDLE_SUSPEND_SECONDS": "-5"}, "HANGAR_IDLE_SUSPEND_SECONDS='-5'"),
        ({"HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS": "1m"}, "HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS='1m'"),
        (
            {"HANGAR_GOVERNANCE": "on"},
            "HANGAR_GOVERNANCE='on': Input should be 'off', 'shadow' or 'enforce'",
        ),
        (
            {"HANGAR_GOVERNANCE_MODES": "approvals=enforce"},
            "HANGAR_GOVERNANCE_MODES='approvals=enforce': unknown kind 'approvals': the kinds are approval, run",
        ),
        (
            {"HANGAR_GOVERNANCE_MODES": "run=loud"},
            "HANGAR_GOVERNANCE_MODES='run=loud': run='loud': the modes are off, shadow, enforce",
        ),
        ({"HANGAR_GOVERNANCE_MODES": "enforce"}, "'enforce' is not kind=mode"),
        ({"HANGAR_GOVERNANCE_MODES": "run=off,run=enforce"}, "run is given twice"),
        ({"HANGAR_GOVERNANCE_URL": "tower.example.com"}, "HANGAR_GOVERNANCE_URL='tower.example.com'"),
        (
            {"HANGAR_LOG_LEVEL": "verbose"},
            "HANGAR_LOG_LEVEL='verbose': Input should be 'debug', 'info', 'warning' or 'error'",
        ),
        ({"HANGAR_LOG_FORMAT": "xml"}, "HANGAR_LOG_FORMAT='xml': Input should be 'json' or 'text'"),
        ({"HANGAR_NAMESPACE": "Team_A"}, "HANGAR_NAMESPACE='Team_A': 'Team_A' is not a namespace name"),
        ({"HANGAR_WATCH_NAMESPACES": "a,*"}, "`*` (every namespace) stands alone"),
        ({"HANGAR_WATCH_NAMESPACES": "a,B"}, "'B' is not a namespace name"),
        ({"HANGAR_WORKSPACE_SIZE": "10 GB"}, "'10 GB' is not a Kubernetes quantity"),
        ({"HANGAR_GOVERNANCE": "enforce"}, "HANGAR_GOVERNANCE_WEBHOOK_SECRET is unset"),
        ({"HANGAR_GOVERNANCE_MODES": "run=shadow"}, "HANGAR_GOVERNANCE_WEBHOOK_SECRET is unset"),
        ({"HANGAR_APPROVALS": "governed"}, "HANGAR_APPROVALS=governed needs Tower"),
        (
            {
                "HANGAR_APPROVALS": "governed",
                "HANGAR_GOVERNANCE_MODES": "run=enforce",
                "HANGAR_GOVERNANCE_WEBHOOK_SECRET": "s",
            },
            "HANGAR_APPROVALS=governed needs Tower",
        ),
    ],
)
def test_a_value_not_allowed_refuses_to_start(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    with pytest.raises(SettingsError) as err:
        with_env(monkeypatch, **env)
    assert message in str(err.value)


@pytest.mark.parametrize(
    "env",
    [
        {"HANGAR_DATABASE_URL": "mysql://hangar:hunter2-password@db/hangar"},
        {"HANGAR_MCP_STATE_KEY": "hunter2-password"},
    ],
)
def test_a_refused_secret_is_not_echoed(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> None:
    with pytest.raises(SettingsError) as err:
        with_env(monkeypatch, **env)
    (name,) = env
    assert str(err.value).startswith(f"{name}: ") and "hunter2" not in str(err.value)


def test_every_error_is_named_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SettingsError) as err:
        with_env(monkeypatch, HANGAR_APPROVALS="yes", HANGAR_MAX_SANDBOXES="many")
    assert "HANGAR_APPROVALS=" in str(err.value) and "HANGAR_MAX_SANDBOXES=" in str(err.value)


def test_unknown_hangar_variables_are_found() -> None:
    environ = {
        "HANGAR_APROVALS": "ask",  # misspelled
        "HANGAR_APPROVALS": "ask",
        "HANGAR_URL": "http://x",
        "HANGAR_TEST_POSTGRES_URL": "postgresql://x",
        "HANGAR_GOVERNANCE_MODE": "enforce",  # the variable is HANGAR_GOVERNANCE_MODES
        "PATH": "/bin",
    }
    assert unknown_variables(environ) == ["HANGAR_APROVALS", "HANGAR_GOVERNANCE_MODE"]
