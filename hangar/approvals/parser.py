"""The shell parser: tokens (``shell.tokenize``, ``quick.tokens``) into pipelines of simple commands."""

from __future__ import annotations

from .shell_types import _ASSIGN, Command, Op, Pipeline, Script, ShellSyntaxError, Token, Word, _redirect

REDIRECT_OPS = frozenset({"<", ">", ">>", ">|", "<>", ">&", "<&", "&>", "&>>", "<<", "<<-", "<<<"})
# Reserved words that only shape control flow; the command after them is what runs.
_SKIP = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"})
# Reserved words whose own line is not a command (loop heads, case subjects, tests).
_SKIP_CLAUSE = frozenset({"for", "select", "case", "[[", "function"})


def parse_tokens(tokens: list[Token], comment: bool, *, lenient: bool = False) -> Script:
    """The script these tokens make (``parse`` after the tokens are read, by whichever reader)."""
    pipelines: list[Pipeline] = []
    stages: list[Command] = []
    cur = Command()
    skipping: str | None = None  # inside a clause that runs nothing ("for x in …", "[[ … ]]")

    def end_command() -> None:
        nonlocal cur
        if not cur.empty():
            stages.append(cur)
        cur = Command()

    def end_pipeline() -> None:
        nonlocal stages
        end_command()
        if stages:
            pipelines.append(Pipeline(stages))
        stages = []

    k = 0
    while k < len(tokens):
        tok = tokens[k]
        k += 1
        if isinstance(tok, Op):
            if tok.text in REDIRECT_OPS:
                target = tokens[k] if k < len(tokens) and isinstance(tokens[k], Word) else None
                if target is None:
                    if not lenient:
                        raise ShellSyntaxError(f"redirection {tok.text} without a target")
                else:
                    k += 1
                if skipping is None:
                    assert target is None or isinstance(target, Word)
                    cur.redirects.append(_redirect(tok.text, tok.fd, target, tok.heredoc))
                continue
            if skipping == "[[":
                continue
            skipping = None
            if tok.text in ("|", "|&"):
                end_command()
            else:
                end_pipeline()
            continue
        if skipping is not None:
            if (skipping == "[[" and tok.literal == "]]") or skipping == "function":
                skipping = None  # "function NAME": only the name is skipped
            continue
        if not cur.words:
            parts = tok.parts
            if len(parts) == 1:  # the usual word, one part: Word.is_assignment and .literal, inlined
                p0 = parts[0]
                if p0.kind == "glob" and _ASSIGN.match(p0.text):
                    cur.assigns.append(tok)
                    continue
                lit = p0.text if p0.kind == "glob" else None
            else:
                if tok.is_assignment:
                    cur.assigns.append(tok)
                    continue
                lit = tok.literal if all(p.kind == "glob" for p in parts) else None
            if not cur.assigns and lit in _SKIP:
                continue
            if not cur.assigns and lit in _SKIP_CLAUSE:
                skipping = lit
                continue
        cur.words.append(tok)
    end_pipeline()
    return Script(pipelines, comment)
