"""The bundled tiny T5's task: write dates, years and numbers out in words.

Every input has several correct renderings, so greedy decoding, sampling and beam search give
visibly different (and all correct) answers. The same module generates the training data and
checks the model's outputs.

    "date: 2024-03-05" -> "March 5, 2024" | "5 March 2024" | "the fifth of March 2024" | ...
    "year: 1984"       -> "nineteen eighty-four" | "one thousand nine hundred eighty-four" | ...
    "number: 347"      -> "three hundred forty-seven" | "three hundred and forty-seven" | ...
"""

from __future__ import annotations

import random

ONES = [
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
    "ten",
    "eleven",
    "twelve",
    "thirteen",
    "fourteen",
    "fifteen",
    "sixteen",
    "seventeen",
    "eighteen",
    "nineteen",
]
TENS = ["_", "_", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]
ORDINAL_ONES = [
    "_",
    "first",
    "second",
    "third",
    "fourth",
    "fifth",
    "sixth",
    "seventh",
    "eighth",
    "ninth",
    "tenth",
    "eleventh",
    "twelfth",
    "thirteenth",
    "fourteenth",
    "fifteenth",
    "sixteenth",
    "seventeenth",
    "eighteenth",
    "nineteenth",
]
ORDINAL_TENS = {20: "twentieth", 30: "thirtieth"}
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)

KINDS = ("date", "year", "number")
YEAR_RANGE = (1000, 2099)
DATE_YEARS = (1900, 2099)
NUMBER_RANGE = (0, 999)


def _below_100(n: int) -> str:
    if n < 20:
        return ONES[n]
    tens, ones = divmod(n, 10)
    return TENS[tens] + ("-" + ONES[ones] if ones else "")


def cardinal(n: int, british_and: bool = False) -> str:
    """0..9999 in words, American style ("three hundred forty-seven") or with "and"."""
    if not 0 <= n <= 9999:
        raise ValueError(f"{n} is outside 0..9999")
    if n < 100:
        return _below_100(n)
    parts = []
    thousands, rest = divmod(n, 1000)
    if thousands:
        parts.append(ONES[thousands] + " thousand")
    hundreds, rest = divmod(rest, 100)
    if hundreds:
        parts.append(ONES[hundreds] + " hundred")
    if rest:
        parts.append(("and " if british_and else "") + _below_100(rest))
    return " ".join(parts)


def ordinal(n: int) -> str:
    """1..31 as an ordinal word."""
    if n < 20:
        return ORDINAL_ONES[n]
    tens, ones = divmod(n, 10)
    if ones == 0:
        return ORDINAL_TENS[n]
    return TENS[tens] + "-" + ORDINAL_ONES[ones]


def year_renderings(year: int) -> list[str]:
    out = [cardinal(year), cardinal(year, british_and=True)]
    hi, lo = divmod(year, 100)
    if hi % 10 != 0 or hi < 10:  # 1984 -> nineteen eighty-four; not for 2000-2009 style years
        if lo == 0:
            out.append(_below_100(hi) + " hundred")
        elif lo < 10:
            out.append(_below_100(hi) + " oh " + ONES[lo])
        else:
            out.append(_below_100(hi) + " " + _below_100(lo))
    elif lo >= 10:  # 2024 -> twenty twenty-four
        out.append(_below_100(hi) + " " + _below_100(lo))
    return sorted(set(out))


def number_renderings(n: int) -> list[str]:
    out = {cardinal(n), cardinal(n, british_and=True)}
    if n >= 10:
        out.add(" ".join(ONES[int(d)] for d in str(n)))
    return sorted(out)


def date_renderings(year: int, month: int, day: int) -> list[str]:
    name = MONTHS[month - 1]
    return [
        f"{name} {day}, {year}",
        f"{day} {name} {year}",
        f"the {ordinal(day)} of {name} {year}",
        f"{name} {ordinal(day)}, {year}",
    ]


def renderings(prompt: str) -> list[str]:
    """All correct outputs for a task input such as "date: 2024-03-05"."""
    kind, _, value = prompt.partition(": ")
    if kind == "date":
        y, m, d = (int(x) for x in value.split("-"))
        return date_renderings(y, m, d)
    if kind == "year":
        return year_renderings(int(value))
    if kind == "number":
        return number_renderings(int(value))
    raise ValueError(f"unknown task prefix in {prompt!r}: use one of {', '.join(KINDS)}")


def random_input(rng: random.Random, kind: str | None = None) -> str:
    kind = kind or rng.choice(KINDS)
    if kind == "date":
        month = rng.randint(1, 12)
        year = rng.randint(*DATE_YEARS)
        limit = DAYS_IN_MONTH[month - 1]
        if month == 2 and not (year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)):
            limit = 28
        return f"date: {year:04d}-{month:02d}-{rng.randint(1, limit):02d}"
    if kind == "year":
        return f"year: {rng.randint(*YEAR_RANGE)}"
    return f"number: {rng.randint(*NUMBER_RANGE)}"


def random_pair(rng: random.Random) -> tuple[str, str]:
    """One training example: an input and one of its renderings chosen at random."""
    prompt = random_input(rng)
    return prompt, rng.choice(renderings(prompt))


def held_out_inputs(n: int, seed: int = 12345) -> list[str]:
    """A fixed evaluation set (distinct inputs) for measuring accuracy."""
    rng = random.Random(seed)
    seen: dict[str, None] = {}
    while len(seen) < n:
        seen.setdefault(random_input(rng), None)
    return list(seen)
