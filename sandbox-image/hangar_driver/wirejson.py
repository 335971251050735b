"""The wire's JSON (``protocol.py``) with python3's C codec, ``_json``, not the ``json`` package.

Importing ``json`` compiles ``re`` and its parser (~2.5 ms, the largest import left on a driver's way to
its hello, and one the floor's python3 does not have). ``json.dumps``/``json.loads`` hand their work to
``_json``'s encoder and scanner; these make the same calls with the same arguments (the canonical form:
sorted keys, no spaces, UTF-8 text, no NaN), so the bytes signed and sent are the ones ``json`` made.
A python3 whose ``_json`` is missing, or answers otherwise (checked once, at import), gets ``json``.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

TYPE_CHECKING = False  # typing is not imported on the way to the hello (lazylog.py); mypy reads True
if TYPE_CHECKING:
    from typing import Any, Callable, Dict

_WS = " \t\n\r"  # JSON's whitespace (str.strip's default takes more)


def _unserializable(o: Any) -> Any:
    raise TypeError("Object of type %s is not JSON serializable" % (o.__class__.__name__,))


class _Decoding:
    """What ``_json``'s scanner reads off its context (``json.JSONDecoder``'s attributes), as loads() sets them."""

    def __init__(self, parse_constant: Callable[[str], Any]) -> None:
        self.strict = True
        self.object_hook = None
        self.object_pairs_hook = None
        self.parse_float = float
        self.parse_int = int
        self.parse_constant = parse_constant
        self.memo: Dict[str, str] = {}


def _json_dumps(obj: Any) -> str:
    import json

    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _json_loads(text: str, parse_constant: Callable[[str], Any]) -> Any:
    import json

    return json.loads(text, parse_constant=parse_constant)


_c: Any
try:  # the C codec as a module of no declared type: the calls below are json's own, to private parts
    _c = __import__("_json")
except ImportError:  # pragma: no cover (a python3 built without it)
    _c = None


def _c_dumps(obj: Any) -> str:
    # json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)'s
    # iterencode(obj, _one_shot=True), which json.dumps joins.
    encode = _c.make_encoder({}, _unserializable, _c.encode_basestring, None, ":", ",", True, False, False)
    return "".join(encode(obj, 0))


_scanners: Dict[Any, Any] = {}  # parse_constant -> its scanner


def _c_loads(text: str, parse_constant: Callable[[str], Any]) -> Any:
    # json.JSONDecoder(parse_constant=...).decode(text): leading and trailing whitespace only, else an error.
    scan = _scanners.get(parse_constant)
    if scan is None:
        scan = _scanners[parse_constant] = _c.make_scanner(_Decoding(parse_constant))
    start = len(text) - len(text.lstrip(_WS))
    try:
        obj, end = scan(text, start)
    except StopIteration as exc:
        raise ValueError("Expecting value: char %d" % exc.value) from None
    if text[end:].strip(_WS):
        raise ValueError("Extra data: char %d" % end)
    return obj


def _c_works() -> bool:
    """The C codec answers as ``json`` would for a frame-like value (its private signature could change)."""
    if _c is None:
        return False
    sample = {"v": 1, "b": {"é\n": [True, None, -2.5]}, "a": "x"}
    try:
        text = _c_dumps(sample)
        return (
            text == '{"a":"x","b":{"é\\n":[true,null,-2.5]},"v":1}'
            and _c_loads(" %s\n" % text, float) == sample
        )
    except Exception:
        return False


if _c_works():
    dumps, loads = _c_dumps, _c_loads
else:  # pragma: no cover (another python3's _json)
    dumps, loads = _json_dumps, _json_loads
