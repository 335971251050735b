"""Commands that read or write credentials through a tool rather than by a file's path: a CLI printing the
token it holds (``gh auth token``, ``gcloud auth print-access-token``, ``kubectl config view --raw``, ``aws
configure get``), logging in (which writes its credential store: ``docker login``, ``npm login``, ``az
login``), or reading a secret store (``kubectl get secret -o yaml``, ``vault kv get``). For the rule
"reading or writing credentials": what a tool prints is read by the agent as surely as ``cat`` of the
file it keeps them in. (git's own, ``git credential fill``, is in ``program_rules``' git rule.)

Each tool's subcommand words are its operands once the options that take a value are set aside (GNU-style,
anywhere before ``--``); what is not listed here (``gh auth status``, ``kubectl config view``, which
redacts, ``npm whoami``) is not flagged.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .argv import Parsed, options
from .shell import Word

_REGISTRY_CLIENTS = frozenset({"docker", "podman", "buildah", "nerdctl", "skopeo", "crane", "oras", "regctl"})
_KUBE = frozenset({"kubectl", "oc"})
_NPM = frozenset({"npm", "pnpm"})
CREDENTIAL_TOOLS = (
    frozenset({"gh", "aws", "gcloud", "az", "helm", "vault"}) | _REGISTRY_CLIENTS | _KUBE | _NPM
)

# per tool: the short option letters and the long options that take a value
_VALUES: dict[str, tuple[str, str]] = {
    "gh": ("Rhsp", "--repo --hostname --scopes --git-protocol --user"),
    "aws": (
        "",
        "--profile --region --output --endpoint-url --query --cli-input-json --color --ca-bundle "
        "--cli-read-timeout --cli-connect-timeout --role-arn --role-session-name",
    ),
    "gcloud": (
        "",
        "--project --account --configuration --format --impersonate-service-account --verbosity --key-file "
        "--iam-account --audiences",
    ),
    "az": (
        "otupng",
        "--subscription --resource --scope --tenant --output --query --username --password --name "
        "--resource-group",
    ),
    "helm": ("nup", "--namespace --kube-context --kubeconfig --username --password"),
    "registry": ("Hlup", "--host --config --context --log-level --username --password --authfile"),
    "kube": (
        "nlocs",
        "--namespace --context --kubeconfig --cluster --user --output --selector --token --server --template "
        "--field-selector --as --as-group --duration",
    ),
    "npm": ("L", "--registry --scope --location --userconfig --otp --auth-type --prefix"),
}
_NPM_AUTH_KEY = re.compile(r"_auth|_password|token|^//|:username|:email|certfile|keyfile", re.IGNORECASE)
_STS_TOKENS = frozenset(
    {"get-session-token", "assume-role", "assume-role-with-saml", "assume-role-with-web-identity"}
    | {"get-federation-token"}
)


def _parsed(name: str, args: Sequence[Word]) -> tuple[Parsed, list[str]]:
    kind = (
        "registry"
        if name in _REGISTRY_CLIENTS
        else "kube"
        if name in _KUBE
        else "npm"
        if name in _NPM
        else name
    )
    short, long = _VALUES.get(kind, ("", ""))
    parsed = options(args, short, long.split())
    return parsed, [w.literal or "" for w in parsed.operands]


def credential_use(name: str, args: Sequence[Word]) -> str | None:
    """What ``name args`` does with credentials, for the rule's reason; None if nothing it is known to."""
    if name == "vault":
        return _vault(args)
    parsed, words = _parsed(name, args)
    verbs = tuple(words[:2])
    if name == "gh":
        if verbs in (("auth", "token"), ("auth", "git-credential")) or (
            verbs == ("auth", "status") and parsed.has("-t", "--show-token")
        ):
            return "prints the GitHub CLI's token"
        if (
            verbs[:1] == ("auth",)
            and words[1:2]
            and words[1] in ("login", "refresh", "logout", "switch", "setup-git")
        ):
            return "writes the GitHub CLI's credentials"
        return None
    if name == "aws":
        if words[:1] == ["configure"] and (len(words) == 1 or words[1] in ("get", "set", "import")):
            return "reads or writes the AWS CLI's credentials"
        if verbs == ("configure", "export-credentials") or verbs[1:] == ("get-login-password",):
            return "prints AWS credentials or a registry password"
        if (verbs[:1] == ("sts",) and verbs[1:] and verbs[1] in _STS_TOKENS) or verbs == (
            "codeartifact",
            "get-authorization-token",
        ):
            return "prints temporary AWS credentials or a token"
        return None
    if name == "gcloud":
        if verbs[:1] == ("auth",) and (
            verbs[1:2] in (("print-access-token",), ("print-identity-token",), ("login",))
            or verbs[1:2] == ("activate-service-account",)
            or (verbs[1:2] == ("application-default",) and words[2:3] in (["print-access-token"], ["login"]))
        ):
            return "prints or writes gcloud's credentials"
        if verbs == ("config", "config-helper") or (
            words[:3] == ["iam", "service-accounts", "keys"] and words[3:4] == ["create"]
        ):
            return "prints gcloud's token or makes a service account key"
        return None
    if name == "az":
        if verbs == ("account", "get-access-token") or verbs == ("login",) or verbs == ("acr", "login"):
            return "prints or writes the Azure CLI's credentials"
        if words[:3] in (["ad", "sp", "create-for-rbac"], ["ad", "sp", "credential"]) or verbs == (
            "aks",
            "get-credentials",
        ):
            return "makes or writes Azure credentials"
        return None
    if name in _REGISTRY_CLIENTS or name == "helm":
        if verbs[:1] in (("login",), ("logout",)) or (name == "helm" and verbs in (("registry", "login"),)):
            return f"writes {name}'s registry credentials"
        return None
    if name in _KUBE:
        return _kube(name, parsed, words)
    return _npm(parsed, words)


def _kube(name: str, parsed: Parsed, words: list[str]) -> str | None:
    if words[:2] == ["config", "view"] and parsed.has("--raw"):
        return "prints the kubeconfig's credentials"
    if words[:2] in (["config", "set-credentials"], ["create", "token"]) or (
        name == "oc"
        and (words[:1] == ["login"] or (words[:1] == ["whoami"] and parsed.has("-t", "--show-token")))
    ):
        return "prints or writes a Kubernetes token"
    if (
        words[:1] == ["get"]
        and words[1:2]
        and re.match(r"secrets?(?:$|/|\.)", words[1])
        and (parsed.given("-o", "--output", "--template"))
    ):
        return "prints a Kubernetes Secret's values"
    return None


def _npm(parsed: Parsed, words: list[str]) -> str | None:
    if words[:1] and words[0] in ("login", "adduser", "add-user", "logout", "token"):
        return "reads or writes the registry's token (~/.npmrc)"
    verb = (
        words[1:2]
        if words[:1] in (["config"], ["c"])
        else words[:1]
        if words[:1] in (["get"], ["set"])
        else []
    )
    keys = words[2:] if words[:1] in (["config"], ["c"]) else words[1:]
    if verb and verb[0] in ("get", "set", "delete", "rm") and any(_NPM_AUTH_KEY.search(k) for k in keys):
        return "reads or writes the registry's token (~/.npmrc)"
    return None


def _vault(args: Sequence[Word]) -> str | None:
    """vault's flags are single-dash words (``-field=x``, ``-address URL``); its subcommand is its first word
    that is not one."""
    words = [w.literal or "" for w in args if not (w.literal or "").startswith("-")]
    if words[:1] in (["login"], ["token"], ["read"], ["write"]) or words[:2] in (
        ["print", "token"],
        ["kv", "get"],
        ["kv", "put"],
        ["kv", "patch"],
    ):
        return "reads or writes Vault's secrets or token"
    return None
