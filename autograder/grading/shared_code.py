"""Which of the student's functions and classes run a helper of their own in common.

A known mistake found in two of them is one mistake when both reach the same helper (a `_generate` loop that
`greedy_decode` and `sample_decode` both call): grade._charge_once charges it once. Helpers are the file's own
top-level functions and classes that the stub does not declare. Read from the source text with `ast`: the
student's code is never imported or run here.
"""
import ast


def shared_helpers(source: str, api: set[str]) -> dict[str, frozenset[str]]:
    """Each top-level function or class of `source` -> the helpers (top-level defs not in `api`) it reaches
    through references, directly or through other defs of the file. {} when the text does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return {}
    defs = {n.name: n for n in tree.body
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    try:
        refers = {name: {n.id for n in ast.walk(node) if isinstance(n, ast.Name) and n.id in defs} - {name}
                  for name, node in defs.items()}
    except RecursionError:
        return {}
    reach = {}
    for name in defs:
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
