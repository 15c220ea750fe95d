"""Hostile restriction strings never execute anything and never crash or hang the engine.

Every input must end either as a working restriction or as a
:class:`SearchSpaceError` whose message names the restriction; never another
exception, never a hang (each construction is bounded in wall time).

"Nothing executes" is checked with a Python audit hook: while the engine runs,
no ``exec``/``eval`` of code, no process spawn, no import of a module that is
not yet loaded and no file opened under the sentinel path may be seen; the
payloads also try to write a sentinel file, which must never appear.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from pytest_autotune.space import SearchSpace, SearchSpaceError, compile_restriction, literal_values

PARAMS = {"x": [1, 2, 3, 4], "y": [0, 1, 2], "s": ["a", "b"]}
# CPU seconds (not wall clock: CI machines are shared); a hang would blow far past it
TIME_LIMIT_S = 5.0
MARK = "pwned_by_restriction"

# -- the audit sentinel -----------------------------------------------------------------------

_AUDIT = threading.local()
_SEEN: list[tuple[str, str]] = []
_FORBIDDEN = ("exec", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "subprocess.Popen",
              "ctypes.", "socket.", "builtins.input", "shutil.", "os.remove", "os.rename", "os.mkdir")
_TRAP_MODULES = ("antigravity", "this", "webbrowser", "turtle", "tkinter", "pty", "smtplib", "ftplib")


def _hook(event: str, args: tuple) -> None:
    if not getattr(_AUDIT, "on", False):
        return
    if event.startswith(_FORBIDDEN):
        _SEEN.append((event, repr(args)[:200]))
    elif event == "import" and args and str(args[0]).split(".")[0] in _TRAP_MODULES:
        _SEEN.append((event, repr(args)[:200]))
    elif event == "open" and args and MARK in str(args[0]):
        _SEEN.append((event, repr(args)[:200]))


sys.addaudithook(_hook)  # cannot be removed; inert unless _AUDIT.on


class _Hang(Exception):
    pass


@contextmanager
def watched(limit_s: float = 10 * TIME_LIMIT_S):
    """Record forbidden audit events; interrupt (best effort, Python level) a run that hangs."""
    _SEEN.clear()
    use_alarm = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")
    if use_alarm:
        def on_alarm(signum, frame):
            raise _Hang(f"still running after {limit_s} s")
        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, limit_s)
    _AUDIT.on = True
    try:
        yield
    finally:
        _AUDIT.on = False
        if use_alarm:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


@pytest.fixture(autouse=True)
def _sentinel_dir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # payloads write relative sentinel files here
    yield tmp_path
    assert not any(MARK in p.name for p in tmp_path.iterdir()), "a payload wrote its sentinel file"


def check_outcome(text: str, params=PARAMS) -> SearchSpace | SearchSpaceError:
    """Build the space; assert the outcome is a space or a clear SearchSpaceError, quickly, with no side effects."""
    start = time.process_time()
    try:
        with watched():
            outcome: SearchSpace | SearchSpaceError = SearchSpace(params, [text])
    except SearchSpaceError as exc:
        outcome = exc
    elapsed = time.process_time() - start
    assert not _SEEN, f"restriction {text[:120]!r} triggered {_SEEN}"
    assert elapsed < TIME_LIMIT_S, f"restriction {text[:120]!r} took {elapsed:.2f} s"
    if isinstance(outcome, SearchSpaceError):
        message = str(outcome)
        assert message, "an error must say what is wrong"
        assert "restriction" in message or "empty" in message, message
        assert "Traceback" not in message
    else:
        assert 1 <= len(outcome) <= outcome.cartesian_size
    return outcome


# -- payloads ---------------------------------------------------------------------------------

SENTINEL_FILE = f"{MARK}.txt"
PAYLOADS = [
    f"__import__('os').system('touch {SENTINEL_FILE}')",
    "__import__('antigravity')",
    f"open('{SENTINEL_FILE}', 'w').write('x')",
    f"exec(\"open('{SENTINEL_FILE}', 'w')\")",
    f"eval(\"open('{SENTINEL_FILE}', 'w')\")",
    "compile('1', 'f', 'eval')",
    "globals()", "locals()", "vars()", "dir()", "breakpoint()", "input()", "help()",
    "getattr(x, '__class__')",
    "x.__class__", "x.__class__.__mro__[1].__subclasses__()", "s.upper() == 'A'", "(1).__add__(2)",
    "().__class__.__base__.__subclasses__()",
    "__builtins__", "__import__", "__name__ == '__main__'", "__debug__",
    "(lambda: 1)()", "(lambda q: q)(x) > 1",
    "[c for c in range(10)]", "{c for c in range(3)}", "{c: c for c in range(3)}", "(c for c in range(3))",
    "[x for x in ().__class__.__bases__[0].__subclasses__() if x.__name__ == 'Popen']",
    "x[0]", "s[0] == 'a'", "PARAMS['x']", "s[::-1] == 'a'",
    "(y := 3) > 1", "[*s]", "min(*s)", "max(**{'a': 1})", "f(*x)",
    "f'{x}' == '1'", "f'{__import__(\"os\").system(\"touch " + SENTINEL_FILE + "\")}'",
    "9**9**9**9", "9**9**9**9 > x", "-9**9**9**9 < x", "2**62 ** 2 > x", "x ** 10**18 > 1",
    "(1 << 4000000000) * (1 << 4000000000) > x", "1 << 40000000000 > x", "x << 10**18 > 1",
    "'a' * 10**10 == s", "s * 10**12 == 'a'", "('a' * 60000) * 60000 == s", "x * 'ab' * 4000000000 == s",
    "10**18 * 10**18 * 10**18 > x",
    "round(x, 10**18) > 1", "int('9' * 5000) > x", "float('nan') != x", "float('inf') > x",
    "1" * 5000 + " > x", "x > " + "9" * 4300, "1e400 > x", "1j > x", "b'a' == s", "... == x", "None == x",
    "x if x else __import__('os')", "x or __import__('os')", "x > 1 and open('/etc/passwd')",
    "x in [c for c in range(5)]", "x in (y, 2)", "x in range(5)", "x in {1, 2}", "x is 1", "x is not None",
    "await x", "yield x", "x @ y", "x; import os", "import os", "x\nimport os", "x > 1 # comment",
    "\x00", "x > 1\x00", "", "   ", "(", ")", "x >", "lambda", "def", "class", "\\", "'unterminated",
    "x if y", "not", "**x", "min()", "max(x)", "abs()", "abs(x, y)", "int(x, 2)", "round(x, 1, 2)", "float()",
    "abs(s)", "s < 3", "-s", "s / 2 > 1", "s ** 2", "~s",
    "x / 0 > 1", "x % 0 == 1", "1 / 0", "0 ** -1 > x",
]


def nested(n: int, left: str, right: str, core: str = "x") -> str:
    return left * n + core + right * n


hostile_text = st.one_of(
    st.sampled_from(PAYLOADS),
    st.builds(lambda p, q, op: f"({p}) {op} ({q})", st.sampled_from(PAYLOADS), st.sampled_from(PAYLOADS),
              st.sampled_from(["and", "or", "+", "<", "if x else"])),
    st.builds(lambda p, n: nested(n, "(", ")", p), st.sampled_from(PAYLOADS[:10]), st.integers(1, 300)),
    st.integers(1, 1200).map(lambda n: nested(n, "(", ")")),
    st.integers(1, 3000).map(lambda n: "not " * n + "x"),
    st.integers(1, 3000).map(lambda n: "-" * n + "x > 0"),
    st.integers(1, 3000).map(lambda n: "~" * n + "x > 0"),
    st.integers(1, 1500).map(lambda n: nested(n, "min(x, ", ")")),
    st.integers(1, 1500).map(lambda n: nested(n, "abs(", ")")),
    st.integers(1, 1500).map(lambda n: nested(n, "(x if ", " else y)")),
    st.integers(1, 2000).map(lambda n: " + ".join(["x"] * n) + " > 3"),
    st.integers(1, 2000).map(lambda n: " < ".join(["x"] * n)),
    st.integers(1, 2000).map(lambda n: " and ".join(["x > 0"] * n)),
    st.lists(st.integers(0, 99), min_size=2, max_size=8).map(lambda xs: "**".join(map(str, xs)) + " > x"),
    st.integers(0, 30000).map(lambda n: "s == '" + "a" * n + "'"),
    st.integers(0, 30000).map(lambda n: "s in ('" + "b" * n + "', 'a')"),
    st.text(alphabet=st.sampled_from(list("xys()+-*/%<>=!&|^~.,:;'\"[]{}@_ \n\t0123456789aeinortf")),
            max_size=120),
    st.text(max_size=60),
    st.lists(st.sampled_from(["x", "y", "s", "(", ")", "+", "*", "**", "<", "and", "or", "not", "if", "else", "in",
                              "(1, 2)", "lambda", ":", "for", "[", "]", ".", "__class__", "__import__", "'os'",
                              ",", "min", "abs", "9", "0", "/", "%", "//", "<<", ":=", "*", "f'", "{", "}"]),
             max_size=40).map(" ".join),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(hostile_text)
@example("__import__('os').system('touch " + SENTINEL_FILE + "')")
@example("(" * 1000 + "x" + ")" * 1000)
@example("not " * 1000 + "x")
@example("9**9**9**9")
@example("'a' * 10**10 == s")
@example("(1 << 4000000000) * (1 << 4000000000) > x")
@example("x > 1 and " * 1500 + "True")
@example("s == '" + "a" * 20000 + "'")
def test_hostile_restrictions_are_contained(text):
    check_outcome(text)


@pytest.mark.parametrize("text", PAYLOADS, ids=[f"{i}:{p[:30]}" for i, p in enumerate(PAYLOADS)])
def test_every_payload(text):
    check_outcome(text)


def test_the_audit_sentinel_works():
    """The checks above could not fail if the hook saw nothing even when code does run."""
    with watched():
        exec(compile("1 + 1", "<probe>", "exec"))  # noqa: S102 - the probe must be seen
    assert any(event == "exec" for event, _ in _SEEN)
    with watched():
        open(f"{MARK}.probe", "w").close()
    assert any(event == "open" for event, _ in _SEEN)
    os.remove(f"{MARK}.probe")
    _SEEN.clear()


@pytest.mark.parametrize("text, culprit", [
    ("__import__('os').system('touch x')", "call of \"__import__('os').system\" is not allowed"),
    ("__import__('os')", "call of '__import__' is not allowed"),
    ("x.__class__", "Attribute is not allowed"),
    ("(lambda: 1)()", "call of 'lambda: 1' is not allowed"),
    ("[c for c in range(3)]", "ListComp is not allowed"),
    ("(y := 3) > 1", "NamedExpr is not allowed"),
    ("f'{x}' == '1'", "JoinedStr is not allowed"),
    ("x[0] > 1", "Subscript is not allowed"),
    ("min(*s) > 1", "plain positional arguments"),
    ("__builtins__", "name '__builtins__' is not allowed"),
    ("not " * 1000 + "x", "nested deeper than"),
    ("(" * 1000 + "x" + ")" * 1000, "not a valid Python expression"),
    ("x > " + "1" * 5000, "digits"),
    ("x > 2**63 - 1 or x > 9223372036854775807", "empty"),  # exact integers: never true here
    ("9**9**9**9 > x", "integer of more than 65536 bits"),  # Python would hang: an error instead
    ("1 << 40000000000 > x", "integer of more than 65536 bits"),
    ("(1 << 4000000000) * (1 << 4000000000) > x", "integer of more than 65536 bits"),
    ("x == '" + "a" * 20000 + "'", "longer than"),
    ("'a' * 10**10 == s", "string repetition"),
    ("s < 3", "failed to evaluate"),
], ids=lambda v: v[:40] if isinstance(v, str) else None)
def test_hostile_input_gets_a_specific_message(text, culprit):
    outcome = check_outcome(text)
    assert isinstance(outcome, SearchSpaceError), f"{text[:60]!r} was accepted"
    assert culprit in str(outcome)


@pytest.mark.parametrize("text, expected", [
    ("9**9**9**9 > x", None),             # int64/float64 arithmetic: finishes, whatever it decides
    ("1 << 40000000000 > x", None),
    ("x ** 10**18 > 1", None),
    ("2 ** (x * 20) > 2 ** 59", {(3,), (4,)}),  # 2**80 is beyond int64: float64, not wrapped around
    ("x / 0 > 1", "empty"),                # division by zero: invalid, not an exception
])
def test_huge_arithmetic_finishes(text, expected):
    outcome = check_outcome(text, {"x": [1, 2, 3, 4]})
    if expected == "empty":
        assert isinstance(outcome, SearchSpaceError) and "empty" in str(outcome)
    elif expected is not None:
        assert {outcome.tuple(r) for r in range(len(outcome))} == expected


def test_restriction_text_is_never_evaluated_by_python(monkeypatch):
    """Belt and braces: with eval/exec/compile(exec) unavailable the engine works all the same."""
    import builtins

    def refuse(*args, **kwargs):
        raise AssertionError("the engine called eval/exec")

    monkeypatch.setattr(builtins, "eval", refuse)
    monkeypatch.setattr(builtins, "exec", refuse)
    space = SearchSpace(PARAMS, ["x % 2 == 0 or s == 'a'", "min(x, y) < 2", "(x / y if y else 0) < 3"])
    assert len(space) > 0


# -- value-list expressions (T1 files) are hostile input too --------------------------------------

VALUE_PAYLOADS = [
    "__import__('os').system('touch " + SENTINEL_FILE + "')", "open('" + SENTINEL_FILE + "', 'w')",
    "[x.__class__ for x in range(3)]", "[(lambda: 1)() for i in range(2)]", "list(globals())",
    "[[j for j in range(10**6)] for i in range(10**6)]", "[i for i in range(10**12)]", "range(10**30)",
    "list(range(0, 10**30, 10**20))", "'a' * 10**10", "['a'] * 10**10", "[1] + 'a'", "1 / 0", "[1] ** 2",
    "range('a')", "list(5)", "[i for i in 5]", "(2**20) ** 64 ** 64", "-" * 3000 + "1", "(" * 1000 + "1" + ")" * 1000,
    "[" * 1000 + "]" * 1000, "1" * 5000, "[2**i for i in range(6)]" * 500, "{1: 2}", "[i async for i in x]",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(st.sampled_from(VALUE_PAYLOADS), st.text(max_size=80),
                 st.lists(st.sampled_from(["[", "]", "(", ")", "range", "list", "for", "i", "in", "if", "+", "*",
                                           "**", "2", "10", ",", "'a'", "x", "-"]), max_size=30).map(" ".join)))
@example("[[j for j in range(10**6)] for i in range(10**6)]")
@example("'a' * 10**10")
def test_hostile_value_lists_are_contained(text):
    start = time.process_time()
    try:
        with watched():
            values = literal_values(text)
        assert isinstance(values, list)
    except SearchSpaceError as exc:
        assert "value list" in str(exc)
    assert not _SEEN, _SEEN
    assert time.process_time() - start < TIME_LIMIT_S, text[:80]


def test_compile_restriction_alone_is_safe():
    for text in PAYLOADS:
        with watched():
            try:
                compile_restriction(text, list(PARAMS))
            except SearchSpaceError:
                pass
        assert not _SEEN, (text, _SEEN)
    assert not Path(SENTINEL_FILE).exists()
