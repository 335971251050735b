"""Commands that read or write credentials through a tool rather than by a file's path: a CLI printing the
token it holds (``gh auth token``, ``gcloud auth print-access-token``, ``kubectl config view --raw``, ``aws
configure get``), logging in (which writes its credential store: ``docker login``, ``npm login``, ``az
login``), or reading a secret store (``kubectl get secret -o yaml``, ``vault kv get``). For the rule
"reading or writing credentials": what a tool prints is read by the agent as surely as ``cat`` of the
file it keeps them in. (git's own, ``git credential fill``, is in ``program_rules``' git rule.)

Each tool's subcommand words are its operands once the options that take a value are set aside (GNU-style,
anywhere before ``--``); ``_COMMANDS`` lists the subcommands that are flagged (some only with an option),
and what is not listed (``gh auth status``, ``kubectl config view``, which redacts, ``npm whoami``) is not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from .argv import options
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
_KUBE_SECRET = re.compile(r"secrets?(?:$|/|\.)")  # `secret`, `secrets`, `secret/NAME`, `secrets.v1`


def _each(
    message: str, *commands: str, flags: tuple[str, ...] = ()
) -> list[tuple[tuple[str, ...], tuple[str, ...], str]]:
    """A rule per command (its words, space-separated): the words the subcommand starts with ("*" any word,
    a trailing "$" none after), the options of which one must be given (none: always), the reason."""
    return [(tuple(c.replace("$", " ").split(" ")), flags, message) for c in commands]


_GH_TOKEN = "prints the GitHub CLI's token"
_AWS_KEYS = "reads or writes the AWS CLI's credentials"
_AWS_TEMPORARY = "prints temporary AWS credentials or a token"
_GCLOUD = "prints or writes gcloud's credentials"
_AZURE = "prints or writes the Azure CLI's credentials"
_AZURE_MADE = "makes or writes Azure credentials"
_REGISTRY = "writes {name}'s registry credentials"
_KUBE_TOKEN = "prints or writes a Kubernetes token"
_NPM_TOKEN = "reads or writes the registry's token (~/.npmrc)"
_KUBECTL = _each("prints the kubeconfig's credentials", "config view", flags=("--raw",)) + _each(
    _KUBE_TOKEN, "config set-credentials", "create token"
)
_COMMANDS = {
    "gh": _each(_GH_TOKEN, "auth token", "auth git-credential")
    + _each(_GH_TOKEN, "auth status", flags=("-t", "--show-token"))
    + _each(
        "writes the GitHub CLI's credentials",
        "auth login",
        "auth refresh",
        "auth logout",
        "auth switch",
        "auth setup-git",
    ),
    "aws": _each(_AWS_KEYS, "configure$", "configure get", "configure set", "configure import")
    + _each(
        "prints AWS credentials or a registry password",
        "configure export-credentials",
        "* get-login-password",
    )
    + _each(_AWS_TEMPORARY, "codeartifact get-authorization-token")
    + _each(
        _AWS_TEMPORARY,
        "sts get-session-token",
        "sts assume-role",
        "sts assume-role-with-saml",
        "sts assume-role-with-web-identity",
        "sts get-federation-token",
    ),
    "gcloud": _each(
        _GCLOUD,
        "auth print-access-token",
        "auth print-identity-token",
        "auth login",
        "auth activate-service-account",
        "auth application-default print-access-token",
        "auth application-default login",
    )
    + _each(
        "prints gcloud's token or makes a service account key",
        "config config-helper",
        "iam service-accounts keys create",
    ),
    "az": _each(_AZURE, "account get-access-token", "login$", "acr login")
    + _each(_AZURE_MADE, "ad sp create-for-rbac", "ad sp credential", "aks get-credentials"),
    "helm": _each(_REGISTRY, "login", "logout", "registry login"),
    "registry": _each(_REGISTRY, "login", "logout"),
    "kubectl": _KUBECTL,
    "oc": _KUBECTL + _each(_KUBE_TOKEN, "login") + _each(_KUBE_TOKEN, "whoami", flags=("-t", "--show-token")),
    "npm": _each(_NPM_TOKEN, "login", "adduser", "add-user", "logout", "token"),
    "vault": _each(
        "reads or writes Vault's secrets or token",
        "login",
        "token",
        "read",
        "write",
        "print token",
        "kv get",
        "kv put",
        "kv patch",
    ),
}


def _group(name: str) -> str:
    """The key of ``name``'s options in ``_VALUES`` (and of its commands in ``_COMMANDS``, but for oc's)."""
    if name in _REGISTRY_CLIENTS:
        return "registry"
    return "kube" if name in _KUBE else "npm" if name in _NPM else name


def _starts(words: list[str], start: tuple[str, ...]) -> bool:
    """``words`` begin with ``start`` ("*" any word, "" the end of them)."""
    padded = (*words, "")
    return len(start) <= len(padded) and all(s in ("*", w) for s, w in zip(start, padded, strict=False))


# vault's flags that take a value as the next word when not given as -flag=value (Go's flag package).
_VAULT_VALUES = frozenset(
    "address agent-address ca-cert ca-path client-cert client-key namespace ns tls-server-name wrap-ttl mfa "
    "format field policy-override header log-level method path mount version".split()
)


def _vault_words(args: Sequence[Word]) -> list[str]:
    """vault's words that are not a flag nor a flag's value: its subcommand and operands."""
    words: list[str] = []
    skip = False
    for w in args:
        lit = w.literal or ""
        if skip:
            skip = False
        elif lit.startswith("-"):
            skip = "=" not in lit and lit.lstrip("-") in _VAULT_VALUES
        else:
            words.append(lit)
    return words


def credential_use(name: str, args: Sequence[Word]) -> str | None:
    """What ``name args`` does with credentials, for the rule's reason; None if nothing it is known to."""
    if name == "vault":
        # vault's flags are single-dash words (``-field=x``, ``-address URL``): its subcommand is its first
        # words that are not one.
        parsed, words = options([]), _vault_words(args)
    else:
        short, long = _VALUES.get(_group(name), ("", ""))
        parsed = options(args, short, long.split())
        words = [w.literal or "" for w in parsed.operands]
    rules = _COMMANDS.get(name) or _COMMANDS.get(_group(name), [])
    for start, flags, message in rules:
        if _starts(words, start) and (not flags or parsed.has(*flags)):
            return message.format(name=name)
    if name in _KUBE and words[:1] == ["get"] and len(words) > 1 and _KUBE_SECRET.match(words[1]):
        if parsed.given("-o", "--output", "--template"):
            return "prints a Kubernetes Secret's values"
    if name in _NPM:
        config = words[:1] in (["config"], ["c"])
        verb, keys = (words[1:2], words[2:]) if config else (words[:1], words[1:])
        if (config or verb in (["get"], ["set"])) and verb and verb[0] in ("get", "set", "delete", "rm"):
            if any(_NPM_AUTH_KEY.search(k) for k in keys):
                return _NPM_TOKEN
    return None
