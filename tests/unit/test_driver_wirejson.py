"""The wire's JSON (``hangar_driver/wirejson.py``) is ``json``'s, byte for byte: what a frame's signature
covers must not depend on which of the two made it."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from hangar_driver import protocol as P
from hangar_driver import wirejson


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _reject(name: str) -> Any:
    raise ValueError(name)


def _value(rnd: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "float", "bool", "none"] + (["dict", "list"] if depth < 4 else [])
    kind = rnd.choice(kinds)
    if kind == "str":
        alphabet = 'abc "\\/\n\t\x00\x1f\x7fé€😀\u2028'
        return "".join(rnd.choice(alphabet) for _ in range(rnd.randrange(12)))
    if kind == "int":
        return rnd.choice([0, -1, 7, 2**53 + 1, -(2**70), rnd.randrange(-(10**6), 10**6)])
    if kind == "float":
        return rnd.choice([0.0, -0.0, 1.5, 1e-300, 1e300, 0.1 + 0.2, rnd.uniform(-1e6, 1e6)])
    if kind == "bool":
        return rnd.random() < 0.5
    if kind == "none":
        return None
    if kind == "list":
        return [_value(rnd, depth + 1) for _ in range(rnd.randrange(5))]
    if rnd.random() < 0.1:  # a key json writes as text: alone, as sorting mixed kinds fails in both
        return {rnd.choice([1, -2.5, True, None]): _value(rnd, depth + 1)}
    return {str(_value(rnd, 4)): _value(rnd, depth + 1) for _ in range(rnd.randrange(5))}


def test_it_is_the_c_codec_here() -> None:
    assert wirejson.dumps is wirejson._c_dumps and wirejson.loads is wirejson._c_loads


def test_dumps_and_loads_are_jsons_for_many_values() -> None:
    rnd = random.Random(15)
    for _ in range(2000):
        obj = {"v": 1, "body": _value(rnd), "id": _value(rnd, 4)}
        text = wirejson.dumps(obj)
        assert text == _canonical(obj)
        padded = " \n" + text + "\r\t "
        assert wirejson.loads(padded, _reject) == json.loads(padded, parse_constant=_reject)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), {"a": float("-inf")}, {1: "x", "a": 2}, {"a": object()}, {"a": b"bytes"}],
)
def test_what_json_refuses_to_write_it_refuses_alike(value: Any) -> None:
    with pytest.raises((ValueError, TypeError)) as theirs:
        _canonical(value)
    with pytest.raises(theirs.type):
        wirejson.dumps(value)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "   ",
        "nope",
        '{"a":1} x',
        '{"a":1}{}',
        '{"a":NaN}',
        '{"a":Infinity}',
        '{"a":1,}',
        "\ufeff{}",
        '{"a":"\x01"}',
    ],
)
def test_what_json_refuses_to_read_it_refuses_alike(text: str) -> None:
    with pytest.raises(ValueError):
        json.loads(text, parse_constant=_reject)
    with pytest.raises(ValueError):
        wirejson.loads(text, _reject)


def test_a_frame_signed_with_either_verifies_with_the_other() -> None:
    key = P.new_run_key()
    frame = P.sign(key, P.make_frame("run-1", P.D2G, P.HELLO, {"pid": 7, "python": "3.11.2", "live": True}))
    line = P.encode(frame)
    assert line == (_canonical(frame) + "\n").encode()
    P.verify(key, json.loads(line), P.D2G, "run-1")
    assert P.decode(line) == json.loads(line)
