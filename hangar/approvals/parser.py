"""The shell parser: tokens (``shell.tokenize``, ``quick.tokens``) into pipelines of simple commands."""

from __future__ import annotations

from .shell_types import _ASSIGN, Command, Op, Pipeline, Script, ShellSyntaxError, Token, Word, _redirect

REDIRECT_OPS = frozenset({"<", ">", ">>", ">|", "<>", ">&", "<&", "&>", "&>>", "<<", "<<-", "<<<"})
# Reserved words that only shape control flow; the command after them is what runs.
_SKIP = frozenset({"!", "{", "}", "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "esac"})
# Reserved words that open a clause the parser reads apart from the command around it: a loop head or case
# subject (``for x in …``, ``case … in``) up to the next operator, a test up to its ``]]`` (its ``&&``,
# ``<``, ``(``… are not the shell's operators there), a function's name.
_SKIP_CLAUSE = frozenset({"for", "select", "case", "[[", "function"})
# Of those, the ones whose words bash expands (and runs what they substitute): each such clause is made a
# command of its own, named by the reserved word, with those words for arguments (a test's up to its
# ``]]``; what a head's redirection names as its target), so that the rules look at them as at any
# command's words. A function's name is not expanded: it is dropped.
_HEADS = frozenset({"for", "select", "case", "[["})
# A loop is a group to pipes, as braces are: `curl … | while read l; do eval "$l"; done` feeds each command of
# it, and `for u in …; do curl "$u"; done | sh` pipes each one's output on. It ends at its "done".
_LOOPS = frozenset({"while", "until", "for", "select"})


def parse_tokens(tokens: list[Token], comment: bool, *, lenient: bool = False) -> Script:
    """The script these tokens make (``parse`` after the tokens are read, by whichever reader)."""
    pipelines: list[Pipeline] = []
    stages: list[Command] = []
    cur = Command()
    skipping = False  # after "function": its name is dropped
    # The clause being read apart (see _HEADS), a stage of its own: the command around it (a redirection
    # before the reserved word) goes on after it.
    clause: Command | None = None
    test = False  # the clause is a test: it ends at its "]]", and operators in it are its own
    piped = False  # the last token was a pipe

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

    # The groups open (a subshell, or braces): whether a pipe feeds it (then its commands are stages of the
    # pipeline, as each reads the pipe: `curl … | (cd /tmp && sh)`), and how many pipelines were made before it
    # (a group whose output is piped on joins the next command: `(a; curl …) | sh`).
    groups: list[tuple[bool, int]] = []

    def open_group(after_pipe: bool, paren: bool) -> None:
        joined = after_pipe or bool(groups and groups[-1][0])
        if paren:  # braces end nothing (`>x { a; }`: the redirection is a's), as before groups were followed
            if joined:
                end_command()
            else:
                end_pipeline()
        groups.append((joined, len(pipelines)))

    def close_group(k: int, paren: bool) -> None:
        nonlocal stages
        mark = groups.pop()[1]
        if k < len(tokens) and isinstance(tokens[k], Op) and tokens[k].text in ("|", "|&"):
            end_command()
            stages = [c for p in pipelines[mark:] for c in p.commands] + stages
            del pipelines[mark:]
        elif paren:
            end_command()
            if not (groups and groups[-1][0]):
                end_pipeline()

    k = 0
    while k < len(tokens):
        tok = tokens[k]
        k += 1
        was_piped, piped = piped, False
        if isinstance(tok, Op):
            if tok.text in REDIRECT_OPS:
                target = tokens[k] if k < len(tokens) and isinstance(tokens[k], Word) else None
                if target is None:
                    if not lenient:
                        raise ShellSyntaxError(f"redirection {tok.text} without a target")
                else:
                    k += 1
                assert target is None or isinstance(target, Word)
                if clause is None:
                    if not skipping:
                        cur.redirects.append(_redirect(tok.text, tok.fd, target, tok.heredoc))
                elif not test:
                    clause.redirects.append(_redirect(tok.text, tok.fd, target, tok.heredoc))
                elif target is not None:
                    clause.words.append(target)  # `[[ a < $(…) ]]`: an operand, not a file
                    if target.literal == "]]":
                        stages.append(clause)
                        clause = None
                        test = False
                continue
            if test:
                continue
            if tok.text == "\n" and was_piped:
                piped = True  # `curl … |` at a line's end: the pipeline goes on on the next line
                continue
            if clause is not None:
                stages.append(clause)
                clause = None
            skipping = False
            if tok.text in ("|", "|&"):
                end_command()
                piped = True
            elif tok.text == "(":
                open_group(was_piped, True)
            elif tok.text == ")" and groups:
                close_group(k, True)
            elif groups and groups[-1][0]:
                end_command()  # a separator in a group a pipe feeds: its commands all read the pipe
            else:
                end_pipeline()
            continue
        if clause is not None:
            clause.words.append(tok)
            if test and tok.literal == "]]":
                stages.append(clause)
                clause = None
                test = False
            continue
        if skipping:
            skipping = False  # "function NAME": only the name is dropped
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
                if lit == "{" or lit in _LOOPS:
                    open_group(was_piped, False)
                elif (lit == "}" or lit == "done") and groups:
                    close_group(k, False)
                continue
            if not cur.assigns and lit in _SKIP_CLAUSE:
                if lit in _LOOPS:
                    open_group(was_piped, False)
                if lit in _HEADS:
                    clause = Command(words=[tok])
                    test = lit == "[["
                else:
                    skipping = True
                continue
        cur.words.append(tok)
    if clause is not None:
        stages.append(clause)
    end_pipeline()
    return Script(pipelines, comment)
