"""Package installs that write outside the repository: a global npm (pnpm, yarn, bun) install, pip's
``--user`` site, ``pipx install``, ``uv tool install``, ``go install`` (into ~/go/bin), ``cargo install`` (into
~/.cargo/bin), ``gem install --user-install``, and the directory pip, uv, gem or cargo is told to install into
(``--target``, ``--prefix``, ``--root``, ``--install-dir``; ``GOBIN=DIR``).

A local install (``npm install``, ``pip install -r requirements.txt`` into the project's virtualenv) writes
where the project is; a global one changes the sandbox outside it, as a redirection to /usr/local would.
The caches package managers keep (~/.npm, ~/.cache/pip) are theirs, not the agent's writes, and are left
alone, as a build's are."""

from __future__ import annotations

from collections.abc import Sequence

from .argv import _PYTHON, options
from .shell import Word

_NPM_CHANGES = frozenset(
    "install i in ins inst insta instal isnt isnta isntal isntall add update up upgrade udpate "
    "uninstall unlink remove rm r un link ln".split()
)
_NODE_MANAGERS = frozenset({"npm", "pnpm", "bun"})
INSTALLERS = _NODE_MANAGERS | {"yarn", "pip", "pip3", "pipx", "uv", "go", "cargo", "gem"}
_PIP_VALUES = (
    "--target --prefix --root --requirement --constraint --editable --index-url --extra-index-url "
    "--find-links --src --upgrade-strategy --platform --python-version --implementation --abi --log "
    "--cache-dir --trusted-host --proxy --timeout --retries --exists-action --cert --client-cert "
    "--progress-bar --root-user-action --report --config-settings --global-option --no-binary --only-binary"
).split()


def _subcommand(args: Sequence[Word]) -> tuple[str, list[Word]]:
    """The first operand (npm's, pip's command) and what follows it."""
    for k, word in enumerate(args):
        lit = word.literal or ""
        if not lit.startswith("-"):
            return lit, list(args[k + 1 :])
    return "", []


_CARGO_VALUES = (
    "--version --git --branch --tag --rev --path --root --index --registry --features --jobs --target "
    "--target-dir --profile --config --color --bin --example -Z"
).split()
_GEM_VALUES = (
    "--install-dir --bindir --version --platform --source --document --build-root --env-shebang --suggestions "
    "--conservative --file --without --format-executable --post-install-message --lock"
).split()


def global_install(
    name: str, args: Sequence[Word], assigns: Sequence[Word] = ()
) -> tuple[str | None, list[Word | str]]:
    """What an install writes outside the repository: (a description of a place hangar cannot name exactly,
    or None; the directories it was told to write into, to check as any write). ``assigns``: the command's
    environment prefixes (``GOBIN=DIR go install``)."""
    if (
        _PYTHON.match(name)
        and len(args) >= 2
        and args[0].literal == "-m"
        and args[1].literal in ("pip", "pipx")
    ):
        name, args = args[1].literal or "", args[2:]
    if name in _NODE_MANAGERS:
        command, _ = _subcommand(args)
        parsed = options(args)
        global_ = parsed.has("-g", "--global") or "global" in parsed.texts("--location")
        if global_ and command in _NPM_CHANGES:
            return f"{name}'s global packages", []
        return None, []
    if name == "yarn":
        command, rest = _subcommand(args)
        if command == "global" and _subcommand(rest)[0] in ("add", "remove", "upgrade"):
            return "yarn's global packages", []
        return None, []
    if name == "pipx":
        command, _ = _subcommand(args)
        if command in ("install", "inject", "upgrade", "upgrade-all", "uninstall", "reinstall", "ensurepath"):
            return "pipx's environments (~/.local)", []
        return None, []
    if name == "go":
        command, _ = _subcommand(args)
        if command != "install":
            return None, []
        gobin = [w.text.split("=", 1)[1] for w in assigns if w.text.startswith("GOBIN=")]
        return (None, list(gobin)) if gobin else ("go's bin directory (~/go/bin)", [])
    if name == "cargo":
        command, rest = _subcommand(args)
        if command not in ("install", "uninstall"):
            return None, []
        roots = options(rest, "jZF", _CARGO_VALUES).values.get("--root", [])
        return (None, list(roots)) if roots else ("cargo's bin directory (~/.cargo/bin)", [])
    if name == "gem":
        command, rest = _subcommand(args)
        if command not in ("install", "uninstall", "update"):
            return None, []
        parsed = options(rest, "ivnsgP", _GEM_VALUES)
        dirs = parsed.given("-i", "--install-dir", "-n", "--bindir")
        return ("gem's user directory (~/.gem)" if parsed.has("--user-install") else None), dirs
    if name == "uv":
        command, rest = _subcommand(args)
        if command == "tool":
            sub, _ = _subcommand(rest)
            return ("uv's tools (~/.local)" if sub in ("install", "upgrade", "uninstall") else None), []
        if command != "pip":
            return None, []
        name, args = "pip", rest  # `uv pip install …` takes pip's options
    if name in ("pip", "pip3"):
        command, rest = _subcommand(args)
        if command not in ("install", "uninstall", "sync"):
            return None, []
        parsed = options(rest, "trcefi", _PIP_VALUES)
        dirs = parsed.given("-t", "--target", "--prefix", "--root")
        return ("pip's user site (~/.local)" if parsed.has("--user") else None), dirs
    return None, []
