"""The strings inline code builds from pieces (``hangar/approvals/code_values.py``, ``code_text.py``): each row is the code of
one language, the expression read at its start, and the shell text it stands for: a command (``as_command``,
what a shell call runs) or a word (``as_word``, a path or a program's argument)."""

from __future__ import annotations

import pytest

from hangar.approvals.code_text import MAX_ALTERNATIVES, as_command, as_word
from hangar.approvals.code_values import Reader
from hangar.approvals.inline_code import commands


def _commands(lang: str, code: str, at: int = 0) -> list[str] | None:
    got = Reader(lang, code).expr(at)
    return None if got is None else [as_command(v) for v in got[0]]


def _words(lang: str, code: str, at: int = 0) -> list[str] | None:
    got = Reader(lang, code).expr(at)
    return None if got is None else [as_word(v) for v in got[0]]


@pytest.mark.parametrize(
    ("lang", "code", "command"),
    [
        ("python", "'rm -rf ' + d", "rm -rf $d"),
        ("python", "f'rm -rf {d}'", "rm -rf $d"),
        ("python", "f'rm -rf {d!r:>10}/x'", "rm -rf $d/x"),
        ("python", "f'{{literal}} {d}'", "{literal} $d"),
        ("python", "'rm -rf %s' % d", "rm -rf $d"),
        ("python", "'rm -rf %s/%s' % (a, 'x')", "rm -rf $a/x"),
        ("python", "'rm -rf %(p)s' % vars", "rm -rf $vars"),
        ("python", "'rm -rf {}'.format(d)", "rm -rf $d"),
        ("python", "'rm {0} {x}'.format(d, x='/')", "rm $d /"),
        ("python", "'''rm -rf /'''", "rm -rf /"),
        ("python", "'rm' ' -rf' ' /'", "rm -rf /"),
        ("python", "r'a\\nb'", "a\\nb"),
        ("python", "'a\\nb'", "a\nb"),
        ("python", "'rm -rf ' + os.environ['HOME']", "rm -rf $HOME"),
        ("python", "'rm -rf ' + os.environ.get('HOME', '/x')", "rm -rf $HOME"),
        ("python", "'rm -rf ' + os.getenv('HOME')", "rm -rf $HOME"),
        ("python", "'ls ' + os.getcwd()", "ls $PWD"),
        ("python", "'rm -rf ' + tempfile.mkdtemp()", "rm -rf $mkdtemp"),
        ("python", "'rm -rf ' + d.strip()", "rm -rf $d"),
        ("python", "'rm -rf ' + d.upper()", "rm -rf $upper"),
        ("python", "'rm -rf ' + d[0]", "rm -rf $code_value"),
        ("python", "'rm -rf ' + str(HOME)", "rm -rf $code_HOME"),
        ("python", "'rm -rf \"' + d + '\"'", 'rm -rf "$d"'),
        ("python", '"rm -rf \'" + d + "\'"', "rm -rf ''\"$d\"''"),
        ("python", "'echo ' + d + 'x'", "echo ${d}x"),
        ("node", "`rm -rf ${d}`", "rm -rf $d"),
        ("node", "`rm -rf ${path.join(os.homedir(), 'x')}`", "rm -rf ~/x"),
        ("node", "'rm -rf ' + process.env.HOME", "rm -rf $HOME"),
        ("node", "'rm -rf ' + process.env['HOME']", "rm -rf $HOME"),
        ("ruby", '"rm -rf #{d}"', "rm -rf $d"),
        ("ruby", '"rm -rf #{ENV["HOME"]}"', "rm -rf $HOME"),
        ("ruby", "'rm -rf #{d}'", "rm -rf #{d}"),
        ("perl", '"rm -rf $d"', "rm -rf $d"),
        ("perl", '"rm -rf ${d}/x"', "rm -rf $d/x"),
        ("perl", "'rm -rf ' . $ENV{HOME}", "rm -rf $HOME"),
        ("perl", "'rm -rf ' . $d", "rm -rf $d"),
        ("php", "'rm -rf ' . getenv('HOME')", "rm -rf $HOME"),
        ("php", '"rm -rf {$d}"', "rm -rf $d"),
    ],
)
def test_a_command_built_from_pieces(lang: str, code: str, command: str) -> None:
    assert _commands(lang, code) == [command]


@pytest.mark.parametrize(
    ("lang", "code", "word"),
    [
        ("python", "os.path.join(os.environ['HOME'], '.ssh')", '"$HOME"/.ssh'),
        ("python", "os.path.join('build', d)", 'build/"$d"'),
        ("python", "os.path.join('build', '/etc', 'x')", "/etc/x"),
        ("python", "os.path.expanduser('~/.bashrc')", "~/.bashrc"),
        ("python", "os.path.expanduser('~other/x')", "'~other/x'"),
        ("python", "Path.home() / '.bashrc'", "~/.bashrc"),
        ("python", "Path('~/x').expanduser()", "~/x"),
        ("python", "Path('~/x')", "'~/x'"),
        ("python", "(Path.home() / '.config' / d)", '~/.config/"$d"'),
        ("python", "Path(os.getcwd(), 'x').resolve()", '"$PWD"/x'),
        ("node", "path.join(os.homedir(), '.ssh')", "~/.ssh"),
        ("node", "require('os').homedir() + '/.npmrc'", "~/.npmrc"),
        ("node", "path.join(__dirname, 'dist')", '"$PWD"/dist'),
        ("ruby", "File.join(Dir.home, '.ssh')", "~/.ssh"),
        ("ruby", "File.expand_path('~/.ssh')", "~/.ssh"),
        ("python", "d", '"$d"'),
        ("python", "HOME", '"$code_HOME"'),
    ],
)
def test_a_path_built_from_pieces(lang: str, code: str, word: str) -> None:
    assert _words(lang, code) == [word]


def test_a_name_stands_for_the_values_the_code_gives_it() -> None:
    code = "d = 'build'\nd = 'dist'\ncmd = 'rm -rf ' + d\nos.system(cmd)\n"
    assert _commands("python", code, code.index("cmd)")) == ["rm -rf build", "rm -rf dist"]
    perl = 'my $d = "/"; system("rm -rf $d")'
    assert _commands("perl", perl, perl.index('"rm')) == ["rm -rf /"]
    js = "const d = 'x';\nexecSync(`rm -rf ${d}`)"
    assert _commands("node", js, js.index("`")) == ["rm -rf x"]


@pytest.mark.parametrize(
    ("lang", "code", "found"),
    [
        ("python", "for d in ['build', 'dist']:\n    rmtree(d)", ["build", "dist"]),
        ("python", "for d in ('build',): rmtree(d)", ["build"]),
        ("python", "for d in ['build', x]:\n    rmtree(d)", ["$d"]),
        ("python", "for d in dirs:\n    rmtree(d)", ["$d"]),
        ("python", "d = 'a'\nfor d in ['b']: rmtree(d)", ["a", "b"]),
        ("node", "for (const d of ['dist', 'build']) rmSync(d)", ["dist", "build"]),
        ("perl", 'for my $d ("build", "/") { rmtree($d) }', ["build", "/"]),
    ],
)
def test_a_loop_over_values_the_code_spells_out_gives_each(lang: str, code: str, found: list[str]) -> None:
    at = code.rindex("(") + 1
    assert _commands(lang, code, at) == found


@pytest.mark.parametrize(
    "code",
    [
        "d = 'a' if x else '/'\nos.system('rm -rf ' + d)",  # not a value read here
        "d = 'a'\nd += '/x'\nos.system('rm -rf ' + d)",  # changed in place
        "for d in dirs:\n    os.system('rm -rf ' + d)",  # a loop over values not spelled out
        "d = d + 'x'\nos.system('rm -rf ' + d)",  # itself
        "".join(f"d = 'v{i}'\n" for i in range(MAX_ALTERNATIVES + 1)) + "os.system('rm -rf ' + d)",
    ],
)
def test_a_name_the_code_does_not_spell_out_is_unknown(code: str) -> None:
    got = _commands("python", code, code.index("'rm"))
    assert got is not None and len(got) == 1 and got[0].replace("{", "").startswith("rm -rf $d")


def test_alternatives_are_bounded() -> None:
    code = "".join(f"a = 'v{i}'\n" for i in range(MAX_ALTERNATIVES)) + "x = " + " + ".join(["a"] * 50)
    got = _commands("python", code, code.index("x = ") + 4)
    assert got is not None and len(got) == MAX_ALTERNATIVES


@pytest.mark.parametrize(
    "code",
    [
        "os.system(" + "f(" * 200 + "'x'" + ")" * 200 + ")",
        "os.system(" + "(" * 5000,
        "os.system(x[" * 2000,
        "os.system('" + "{}" * 3000 + "'.format(" + "a," * 3000 + "))",
    ],
)
def test_deep_or_broken_code_ends_the_reading(code: str) -> None:
    Reader("python", code).expr(code.index("(") + 1)  # returns, whatever it finds


@pytest.mark.parametrize(
    ("lang", "code"),
    [
        ("ruby", 'system("' + '#{"' * 600 + "x" + '"}' * 600 + '")'),
        ("node", "execSync(`" + "${`" * 600 + "x" + "`}" * 600 + "`)"),
        ("python", "os.system(f'" + '{f"' * 600 + "x" + '"}' * 600 + "')"),
    ],
)
def test_strings_nested_in_holes_end_the_reading(lang: str, code: str) -> None:
    assert isinstance(commands(lang, code), list)  # no RecursionError: holes deeper than a few are unknown
