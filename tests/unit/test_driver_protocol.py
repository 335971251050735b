"""The signed frame format shared by the sandbox driver and the operator's gateway (hangar_driver.protocol)."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from hangar_driver import protocol as P

ROOT = Path(__file__).resolve().parents[2]
SANDBOX = ROOT / "sandbox-image"


def _event(key: str, run: str = "run-1", seq: int = 1) -> dict[str, Any]:
    body = {"name": "text", "payload": {"text": 'héllo ✓ \u2028 "quoted"\nnext'}}
    return P.sign(key, P.make_frame(run, P.D2G, P.EVENT, body, seq=seq))


def test_run_key_is_32_random_bytes_urlsafe() -> None:
    k1, k2 = P.new_run_key(), P.new_run_key()
    assert k1 != k2
    assert len(k1) == 43 and all(c.isalnum() or c in "-_" for c in k1)
    import base64

    assert len(base64.urlsafe_b64decode(k1 + "=")) == 32
    # a key read from a file with a trailing newline is the same key
    assert P.key_bytes(k1 + "\n") == P.key_bytes(k1.encode()) == k1.encode()


def test_sign_verify_roundtrip_over_the_wire() -> None:
    key = P.new_run_key()
    frame = _event(key)
    line = P.encode(frame)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    decoded = P.decode(line)
    assert decoded == frame
    P.verify(key, decoded, P.D2G, "run-1")
    # bytes key and str key are the same key
    P.verify(key.encode(), decoded, P.D2G, "run-1")
    # the signature is over the canonical form: key order on the wire does not matter
    shuffled = json.dumps(dict(reversed(list(frame.items()))), ensure_ascii=True).encode()
    P.verify(key, P.decode(shuffled), P.D2G, "run-1")
    # canonical bytes are exactly the documented serialisation
    obj = {k: v for k, v in frame.items() if k != "sig"}
    assert (
        P.canonical(frame)
        == json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
    )


def test_tampering_with_one_byte_of_the_body_is_refused() -> None:
    key = P.new_run_key()
    line = P.encode(_event(key))
    i = line.index(b"hello") if b"hello" in line else line.index(b"llo")
    tampered = line[:i] + b"j" + line[i + 1 :]
    assert tampered != line
    with pytest.raises(P.BadSignature, match="bad signature"):
        P.verify(key, P.decode(tampered), P.D2G, "run-1")
    # changing the seq (a replayed event renumbered) is refused too
    frame = P.decode(line)
    frame["seq"] = 2
    with pytest.raises(P.BadSignature, match="bad signature"):
        P.verify(key, frame, P.D2G, "run-1")
    # flipping one hex digit of the signature
    frame = P.decode(line)
    frame["sig"] = ("0" if frame["sig"][0] != "0" else "1") + frame["sig"][1:]
    with pytest.raises(P.BadSignature, match="bad signature"):
        P.verify(key, frame, P.D2G, "run-1")
    # no signature at all
    frame = P.decode(line)
    del frame["sig"]
    with pytest.raises(P.BadSignature):
        P.verify(key, frame, P.D2G, "run-1")


def test_wrong_key_is_refused() -> None:
    frame = _event(P.new_run_key())
    with pytest.raises(P.BadSignature, match="bad signature"):
        P.verify(P.new_run_key(), frame, P.D2G, "run-1")


def test_wrong_direction_and_g2d_replayed_as_d2g_are_refused() -> None:
    key = P.new_run_key()
    ack = P.sign(key, P.make_frame("run-1", P.G2D, P.ACK, {"seq": 3}))
    P.verify(key, ack, P.G2D, "run-1")
    # replaying the gateway's own frame back to it as if the driver sent it
    with pytest.raises(P.BadSignature, match="wrong direction"):
        P.verify(key, ack, P.D2G, "run-1")
    # relabelling the direction breaks the signature
    relabelled = dict(ack, dir=P.D2G)
    with pytest.raises(P.BadSignature, match="bad signature"):
        P.verify(key, relabelled, P.D2G, "run-1")
    # a d2g frame can't be played to the driver either
    with pytest.raises(P.BadSignature, match="wrong direction"):
        P.verify(key, _event(key), P.G2D, "run-1")
    # a type that belongs to the other direction, even signed, is refused
    odd = P.sign(key, P.make_frame("run-1", P.D2G, P.COMMAND, {"op": "shutdown"}))
    with pytest.raises(P.BadSignature, match="unknown frame type"):
        P.verify(key, odd, P.D2G, "run-1")


def test_wrong_run_and_version_are_refused() -> None:
    key = P.new_run_key()
    with pytest.raises(P.BadSignature, match="wrong run"):
        P.verify(key, _event(key, run="run-2"), P.D2G, "run-1")
    v2 = P.sign(key, dict(P.make_frame("run-1", P.D2G, P.PING, {}), v=2))
    with pytest.raises(P.BadSignature, match="version"):
        P.verify(key, v2, P.D2G, "run-1")


def test_size_limit() -> None:
    key = P.new_run_key()
    big = P.sign(
        key,
        P.make_frame(
            "run-1", P.D2G, P.EVENT, {"name": "text", "payload": {"text": "x" * P.MAX_FRAME_BYTES}}, seq=1
        ),
    )
    with pytest.raises(P.FrameTooLarge):
        P.encode(big)
    with pytest.raises(P.FrameTooLarge):
        P.decode(b"{" + b" " * P.MAX_FRAME_BYTES + b"}\n")
    # just under the limit is fine
    frame = P.make_frame("run-1", P.D2G, P.EVENT, {"name": "text", "payload": {"text": ""}}, seq=1)
    overhead = len(P.encode(P.sign(key, frame))) - 1
    frame["body"]["payload"]["text"] = "y" * (P.MAX_FRAME_BYTES - overhead)
    line = P.encode(P.sign(key, frame))
    assert len(line) == P.MAX_FRAME_BYTES + 1
    P.verify(key, P.decode(line), P.D2G, "run-1")


@pytest.mark.parametrize(
    "line",
    [b"not json\n", b"[1,2]\n", b'{"v":1,"x":NaN}\n', b"\xff\xfe\n", b'"string"\n', b"[" * 100000 + b"\n"],
)
def test_malformed_lines_are_protocol_errors(line: bytes) -> None:
    with pytest.raises(P.ProtocolError):
        P.decode(line)


def test_unsignable_values_are_scrubbed_not_crashing() -> None:
    key = P.new_run_key()
    frame = P.sign(
        key,
        P.make_frame(
            "run-1",
            P.D2G,
            P.EVENT,
            {"name": "text", "payload": {"text": "bad \udcff", "n": float("nan")}},
            seq=1,
        ),
    )
    P.verify(key, P.decode(P.encode(frame)), P.D2G, "run-1")
    assert frame["body"]["payload"]["n"] == "nan"


# ------------------------------------------------------------------------ the sandbox side is stdlib, 3.8


def _sandbox_sources() -> list[Path]:
    files = sorted((SANDBOX / "hangar_driver").glob("*.py"))
    files += [
        p
        for p in sorted((SANDBOX / "bin").iterdir())
        if p.is_file() and p.read_bytes().startswith(b"#!") and b"python" in p.read_bytes().split(b"\n", 1)[0]
    ]
    return files


def test_sandbox_image_imports_only_the_standard_library() -> None:
    # _sha2: the standard library's SHA-256 from 3.12 (protocol.py falls back to it), unknown to this python
    allowed = set(sys.stdlib_module_names) | {"hangar_driver", "__future__", "_sha2"}
    bad = []
    for path in _sandbox_sources():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            for name in names:
                if name.split(".")[0] not in allowed:
                    bad.append(f"{path.relative_to(ROOT)}: {name}")
    assert not bad, bad


def test_hangar_agent_is_executable() -> None:
    agent = SANDBOX / "bin" / "hangar-agent"
    assert agent.stat().st_mode & 0o111 == 0o111


def test_sandbox_image_is_python38_compatible() -> None:
    vermin = Path(sys.executable).parent / "vermin"
    if not vermin.exists():
        pytest.skip("vermin not installed (.venv/bin/pip install vermin)")
    out = subprocess.run(
        [str(vermin), "-t=3.8-", "--no-tips", "--violations", str(SANDBOX)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr


def _driver_imports() -> dict[str, set[str]]:
    """Each hangar_driver module and the sibling modules it imports (top level or inside functions)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((SANDBOX / "hangar_driver").glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                if node.module:
                    deps.add(node.module.split(".")[0])
                else:
                    deps.update(a.name for a in node.names)
            elif (
                isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hangar_driver.")
            ):
                deps.add(node.module.split(".")[1])
        graph[path.stem] = deps
    return graph


def test_driver_modules_import_no_cycle_and_no_adapter_imports_the_registry() -> None:
    graph = _driver_imports()
    importers_of_registry = sorted(m for m, deps in graph.items() if "adapters" in deps)
    assert importers_of_registry == ["turns"], importers_of_registry
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        if state.get(module) == 2:
            return
        assert state.get(module) != 1, "import cycle: " + " -> ".join([*path, module])
        state[module] = 1
        for dep in sorted(graph.get(module, set())):
            visit(dep, [*path, module])
        state[module] = 2

    for module in sorted(graph):
        visit(module, [])


def test_every_event_the_operator_shows_is_one_the_driver_emits() -> None:
    # The two lists cross a process boundary (the driver imports no hangar code), so they are spelt twice:
    # a name shown but never emitted would be a renamed event the operator no longer sees.
    from hangar_operator.router import SHOWN

    assert SHOWN <= P.EVENT_NAMES, sorted(SHOWN - P.EVENT_NAMES)


# ------------------------------------------------------------------------- adoption in place (verify_adoption)
POOL_KEY = P.new_run_key()
ADOPT_NONCE = "n" * 24  # the adopt command's nonce (key derivation)
CONN_NONCE = "c" * 24  # the connection's nonce (its welcome)
SESSION_KEY = P.derive_run_key(POOL_KEY, "s1-r1", ADOPT_NONCE)


def _adoption(
    key: str = SESSION_KEY,
    run: str = "s1-r1",
    body_run: str = "s1-r1",
    came_from: Any = "pool-e-abc",
    nonce: Any = CONN_NONCE,
    ftype: str = P.HELLO,
    direction: str = P.D2G,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "run": body_run,
        "harness": "claude",
        "resume_from": None,
        "adopted_from": came_from,
    }
    if nonce is not None:
        body["nonce"] = nonce
    return P.sign(key, P.make_frame(run, direction, ftype, body))


def test_an_adoption_hello_signed_with_the_derived_key_on_its_connection_is_accepted() -> None:
    frame = P.decode(P.encode(_adoption()))  # over the wire
    P.verify_adoption(SESSION_KEY, frame, "pool-e-abc", "s1-r1", CONN_NONCE)


@pytest.mark.parametrize(
    ("frame", "why"),
    [
        # the pool's own key: whoever holds only the pool's identity is not the session
        (_adoption(key=POOL_KEY), "bad signature"),
        # a key derived for another run, or with another nonce, or from another pool's key
        (_adoption(key=P.derive_run_key(POOL_KEY, "s2-r1", ADOPT_NONCE)), "bad signature"),
        (_adoption(key=P.derive_run_key(POOL_KEY, "s1-r1", "m" * 24)), "bad signature"),
        (_adoption(key=P.derive_run_key(P.new_run_key(), "s1-r1", ADOPT_NONCE)), "bad signature"),
        # signed right, but for another run than the one adopted
        (_adoption(run="s2-r1", body_run="s2-r1"), "wrong run"),
        (_adoption(body_run="s2-r1"), "another run"),
        # from another pool member than the connection's
        (_adoption(came_from="pool-e-other"), "another run"),
        (_adoption(came_from=None), "another run"),
        (_adoption(came_from=["pool-e-abc"]), "another run"),
        # replayed from another connection (its nonce), or without one
        (_adoption(nonce="d" * 24), "wrong nonce"),
        (_adoption(nonce=CONN_NONCE + "x"), "wrong nonce"),
        (_adoption(nonce=""), "wrong nonce"),
        (_adoption(nonce=None), "wrong nonce"),
        (_adoption(nonce=7), "wrong nonce"),
        # not a hello, or the gateway's direction played back
        (_adoption(ftype=P.ACK), "not a hello"),
        (_adoption(ftype=P.PING), "not a hello"),
        (_adoption(direction=P.G2D, ftype=P.WELCOME), "wrong direction"),
    ],
)
def test_a_forged_or_replayed_adoption_is_refused(frame: dict[str, Any], why: str) -> None:
    with pytest.raises(P.BadSignature, match=why):
        P.verify_adoption(SESSION_KEY, frame, "pool-e-abc", "s1-r1", CONN_NONCE)


def test_an_adoption_changed_after_signing_is_refused() -> None:
    for field, value in [("nonce", "d" * 24), ("adopted_from", "pool-e-other"), ("run", "s2-r1")]:
        frame = _adoption()
        frame["body"][field] = value
        with pytest.raises(P.BadSignature, match="bad signature"):
            P.verify_adoption(SESSION_KEY, frame, "pool-e-abc", "s1-r1", CONN_NONCE)


def test_an_adoption_needs_a_connection_nonce_to_match() -> None:
    # a gateway that has no nonce for the connection (never welcomed) accepts nothing, not even an empty one
    with pytest.raises(P.BadSignature, match="wrong nonce"):
        P.verify_adoption(SESSION_KEY, _adoption(nonce=""), "pool-e-abc", "s1-r1", "")


def test_the_signature_is_hmac_sha256_whether_or_not_openssl_is_loaded() -> None:
    """A driver signs its handshake with python3's built-in SHA-256 until it imports ``hashlib`` (OpenSSL:
    milliseconds of its start); this process has, and signs with it. Both must be HMAC-SHA256."""
    import hashlib
    import hmac

    keys = [b"k" * 43, b"x" * 64, b"y" * 65, bytes(range(200)), b" padded-key\n"]
    sizes = [0, 1, 300, 4096, 4097, 70_000]
    code = (
        "import json, sys; from hangar_driver import protocol as P; "
        "keys = [bytes.fromhex(k) for k in json.loads(sys.argv[1])]; "
        "out = [P._digest(k, bytes(i % 251 for i in range(n))) for k in keys for n in json.loads(sys.argv[2])]; "
        "print(json.dumps({'digests': out, 'hashlib': 'hashlib' in sys.modules}))"
    )

    def run(sizes: list[int]) -> dict[str, Any]:
        out = subprocess.run(
            [sys.executable, "-S", "-c", code, json.dumps([k.hex() for k in keys]), json.dumps(sizes)],
            env={"PYTHONPATH": str(SANDBOX)},
            capture_output=True,
            text=True,
            check=True,
        )
        return dict(json.loads(out.stdout))

    def expected(sizes: list[int]) -> list[str]:
        data = [bytes(i % 251 for i in range(n)) for n in sizes]
        return [hmac.new(P.key_bytes(k), d, hashlib.sha256).hexdigest() for k in keys for d in data]

    short = run(sizes[:4])
    assert short == {
        "digests": expected(sizes[:4]),
        "hashlib": False,
    }  # the built-in SHA-256, OpenSSL unloaded
    assert run(sizes)["digests"] == expected(sizes)  # longer data: OpenSSL's
    assert [P._digest(k, bytes(i % 251 for i in range(n))) for k in keys for n in sizes] == expected(sizes)
