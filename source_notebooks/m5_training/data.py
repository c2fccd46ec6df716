"""Toy sequence-to-sequence tasks for milestone 5 (provided by the course: nothing to write here).

Every task is a list of (source text, target text) pairs made by a seeded generator, so a run is
reproducible and nothing is downloaded:

    copy     "cabjf"          -> "cabjf"
    reverse  "cabjf"          -> "fjbac"
    sort     "cabjf"          -> "abcfj"
    dates    "3 March 2021"   -> "2021-03-03"   (the same date written in one of several ways)

Usage:
    >>> from data import make_task
    >>> splits = make_task("reverse", n_train=5000, n_val=200, n_test=500, seed=0)
    >>> splits.train[0]
    ('...', '...')                      # (source, target) strings

The train, validation and test splits never share a source string, so a test score measures
generalisation to unseen inputs, not memorisation. The same `name`, sizes, options and `seed`
always give the same splits (Python's own `random.Random(seed)` only; torch's seed plays no part).
"""
from __future__ import annotations

import datetime
import random
from typing import NamedTuple

TASKS = ("copy", "reverse", "sort", "dates")

DEFAULT_ALPHABET = "abcdefghij"

MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December")

# The ways the `dates` task writes a date, shown for 3 March 2021. Numeric dates are day first
# (DD/MM/YYYY), so "04/03/2021" is 4 March, never April 3.
DATE_FORMATS = (
    "3 March 2021",
    "March 3, 2021",
    "03/03/2021",
    "Mar 3 2021",
    "3 Mar 2021",
    "3rd March 2021",
)


class Splits(NamedTuple):
    """The three splits of a task; each a list of (source, target) string pairs."""
    train: list
    val: list
    test: list


def _ordinal(day: int) -> str:
    if day in (11, 12, 13):
        return f"{day}th"
    return f"{day}" + {1: "st", 2: "nd", 3: "rd"}.get(day % 10, "th")


def format_date(date: datetime.date, style: int) -> str:
    """Write `date` in the style DATE_FORMATS[style] (0 <= style < len(DATE_FORMATS))."""
    d, m, y = date.day, date.month, date.year
    month, mon = MONTHS[m - 1], MONTHS[m - 1][:3]
    return (
        f"{d} {month} {y}",
        f"{month} {d}, {y}",
        f"{d:02d}/{m:02d}/{y}",
        f"{mon} {d} {y}",
        f"{d} {mon} {y}",
        f"{_ordinal(d)} {month} {y}",
    )[style]


def _target(name: str, source: str) -> str:
    if name == "copy":
        return source
    if name == "reverse":
        return source[::-1]
    if name == "sort":
        return "".join(sorted(source))
    raise AssertionError(name)


def _count_strings(alphabet: str, min_len: int, max_len: int) -> int:
    return sum(len(alphabet) ** n for n in range(min_len, max_len + 1))


def make_task(name, n_train, n_val, n_test, seed=0, min_len=1, max_len=10, alphabet=DEFAULT_ALPHABET,
              first_year=1950, last_year=2049):
    """Make the train, validation and test splits of one task.

    Args:
        name: one of TASKS.
        n_train, n_val, n_test: number of pairs in each split (>= 0).
        seed: the generator's seed; the same arguments always give the same splits.
        min_len, max_len, alphabet: copy / reverse / sort only. Each source has a length drawn
            uniformly from min_len..max_len and characters drawn uniformly from `alphabet`.
        first_year, last_year: dates only. Each source is a date drawn uniformly from
            first_year-01-01 .. last_year-12-31, written in a style drawn uniformly from
            DATE_FORMATS; its target is the ISO form YYYY-MM-DD.

    Returns:
        Splits(train, val, test), each a list of (source, target) string pairs. No source string
        appears twice, within a split or across splits. (In `dates` one date may still appear in
        two splits written two different ways.)

    Raises:
        ValueError: for an unknown name, bad lengths or years, or more pairs than the task has
            distinct sources.
    """
    if name not in TASKS:
        raise ValueError(f"unknown task {name!r}; choose one of {TASKS}")
    sizes = (n_train, n_val, n_test)
    if any(n < 0 for n in sizes):
        raise ValueError(f"split sizes must be >= 0, got {sizes}")
    total = sum(sizes)
    rng = random.Random(seed)

    if name == "dates":
        if first_year > last_year or first_year < 1:
            raise ValueError(f"need 1 <= first_year <= last_year, got {first_year}, {last_year}")
        start = datetime.date(first_year, 1, 1).toordinal()
        end = datetime.date(last_year, 12, 31).toordinal()
        available = (end - start + 1) * len(DATE_FORMATS)      # an upper bound: a few styles coincide

        def draw():
            date = datetime.date.fromordinal(rng.randint(start, end))
            return format_date(date, rng.randrange(len(DATE_FORMATS))), date.isoformat()
    else:
        if not (1 <= min_len <= max_len) or not alphabet:
            raise ValueError(f"need 1 <= min_len <= max_len and a non-empty alphabet, got "
                             f"min_len={min_len}, max_len={max_len}, alphabet={alphabet!r}")
        alphabet = "".join(sorted(set(alphabet)))
        available = _count_strings(alphabet, min_len, max_len)

        def draw():
            length = rng.randint(min_len, max_len)
            source = "".join(rng.choice(alphabet) for _ in range(length))
            return source, _target(name, source)

    if total > available:
        raise ValueError(f"task {name!r} has only {available} distinct sources with these options, "
                         f"but {total} pairs were asked for")
    pairs, seen = [], set()
    attempts, max_attempts = 0, 100 * total + 10_000
    while len(pairs) < total:
        attempts += 1
        if attempts > max_attempts:
            raise ValueError(f"could not find {total} distinct sources for task {name!r}; "
                             f"ask for fewer pairs or widen the options")
        source, target = draw()
        if source not in seen:
            seen.add(source)
            pairs.append((source, target))
    return Splits(pairs[:n_train], pairs[n_train:n_train + n_val], pairs[n_train + n_val:])
