"""docs/configuration.md lists every setting as the settings model has it (variable, chart value, default,
allowed values, what it does): the table is generated, and this fails when the file holds another one."""

from __future__ import annotations

from hangar import configdoc
from hangar.config import env_names


def test_the_documented_table_is_the_models() -> None:
    text = configdoc.DOC.read_text()
    assert text == configdoc.render(text), "docs/configuration.md is stale: run `python -m hangar.configdoc`"


def test_the_table_has_a_row_per_setting_with_its_default() -> None:
    rows = configdoc.table().splitlines()[2:]
    assert [r.split("|")[1].strip().strip("`") for r in rows] == list(env_names().values())
    by_env = {r.split("|")[1].strip().strip("`"): [c.strip() for c in r.split("|")[2:-1]] for r in rows}
    assert by_env["HANGAR_APPROVALS"] == [
        "`approvals.policy`",
        "unset",
        "`auto`, `ask`, `deny-risky`, `governed`",
        "Deployment-wide approval policy; an Environment's or a session's own wins. Unset: auto.",
    ]
    assert by_env["HANGAR_GOVERNANCE_SUSPEND_AFTER_SECONDS"][1:3] == ["`60`", "integer ≥ 0"]
    assert by_env["HANGAR_IDLE_SUSPEND_SECONDS"][1] == "`900`"
    assert by_env["HANGAR_GOVERNANCE"][1:3] == ["`off`", "`off`, `shadow`, `enforce`"]
    assert by_env["HANGAR_ADMIN_TOKEN"][2] == "secret text"


def test_the_readme_links_it() -> None:
    readme = (configdoc.DOC.parents[1] / "README.md").read_text()
    assert "(docs/configuration.md)" in readme
