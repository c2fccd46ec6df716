"""Which of the student's functions and classes run a helper of their own in common.

A known mistake found in two of them is one mistake when both reach the same helper (a `_generate` loop that
`greedy_decode` and `sample_decode` both call): grade._charge_once charges it once. Helpers are the file's own
top-level functions and classes that the stub does not declare. Read from the source text with `tokenize`:
the student's code is never imported or run here, and the `ast` module is not used, because on Python 3.11
building ASTs in two threads at once (the batch grader and the test suite grade in threads) can fail with
"AST constructor recursion depth mismatch" in an unrelated caller.
"""
import io
import keyword
import tokenize


def top_level_names(source: str) -> dict[str, set[str]]:
    """Each top-level `def` / `class` of `source` -> the names its block mentions. {} when it does not tokenize."""
    blocks: dict[str, set[str]] = {}
    current, expect_name, line_start = None, False, True
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.NEWLINE:
                line_start = True
                continue
            at_margin, line_start = line_start and tok.start[1] == 0, False
            if at_margin:
                current = None            # a statement (or decorator) at the margin ends the block before it
            if at_margin and tok.string in ("def", "class", "async"):
                expect_name = True
                continue
            if expect_name and tok.type == tokenize.NAME and tok.string not in ("def", "class"):
                current, expect_name = tok.string, False
                blocks.setdefault(current, set())
                continue
            if current is not None and tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                blocks[current].add(tok.string)
    except (tokenize.TokenError, IndentationError, SyntaxError, ValueError):
        return {}
    return blocks


def shared_helpers(source: str, api: set[str]) -> dict[str, frozenset[str]]:
    """Each top-level function or class of `source` -> the helpers (top-level defs not in `api`) it reaches
    through the names it mentions, directly or through other defs of the file."""
    blocks = top_level_names(source)
    refers = {name: (names & set(blocks)) - {name} for name, names in blocks.items()}
    reach = {}
    for name in blocks:
        seen, todo = set(), list(refers[name])
        while todo:
            other = todo.pop()
            if other not in seen and other != name:
                seen.add(other)
                todo.extend(refers[other])
        reach[name] = frozenset(seen - api)
    return reach


def common_helper(reach: dict[str, frozenset[str]], a: str, b: str) -> str | None:
    """A helper both `a` and `b` reach (the first by name), or None."""
    both = reach.get(a, frozenset()) & reach.get(b, frozenset())
    return min(both) if both else None
