"""Prompts filled in from templates with seeded random draws: math word problems and chat requests of
every kind (writing, roleplay, reasoning, math, coding, STEM, humanities, advice, extraction,
summarising).

The answers come from the model itself, so the prompts only need to vary and to read naturally; the
same seed gives the same prompts on every machine. Templates and word lists live in `prompts.json`.
"""

from __future__ import annotations

import itertools
import random
import string

# Each placeholder letter draws from its own range, so that numbers stay plausible in any template
# (a percentage below 100, a "big" amount above the small ones).
RANGES = {
    "a": (12, 90),
    "b": (3, 40),
    "c": (2, 9),
    "k": (2, 9),
    "h": (2, 9),
    "h2": (1, 6),
    "s": (40, 120),
    "s2": (30, 90),
    "w": (8, 45),
    "p": (2, 19),
    "pct": (5, 60),
    "big": (100, 900),
}


def _fields(template: str) -> list[str]:
    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def _fill(template: str, rng: random.Random, lists: dict) -> str:
    values = {}
    for name in _fields(template):
        if name in values:
            continue
        if name in RANGES:
            values[name] = rng.randint(*RANGES[name])
        elif name in ("name", "name2"):
            values[name] = rng.choice([n for n in lists["math_names"] if n not in values.values()])
        elif name == "item":
            values[name] = rng.choice(lists["math_items"])
        else:
            raise KeyError(f"template field '{name}' has no range: {template}")
    return template.format(**values)


def math_prompts(lists: dict, per_template: int = 40, seed: int = 0) -> list[dict]:
    """`per_template` problems per template, each asked with one of the request phrasings in turn."""
    rng = random.Random(seed)
    requests = lists["math_requests"]
    out = []
    for t, template in enumerate(lists["math_templates"]):
        for n in range(per_template):
            problem = _fill(template, rng, lists)
            out.append({"id": f"math/{t}-{n}", "prompt": requests[n % len(requests)].format(problem=problem)})
    return out


def _record(rng: random.Random, lists: dict) -> str:
    """A short note with names, dates, items and amounts: material to extract from or summarise."""
    a, b = rng.sample(lists["math_names"], 2)
    item1, item2 = rng.sample(lists["math_items"], 2)
    day, month = rng.randint(1, 28), rng.choice(["March", "April", "June", "September", "November"])
    n1, n2 = rng.randint(2, 30), rng.randint(2, 30)
    p1, p2 = rng.randint(1, 40) + rng.choice([0, 0.25, 0.5, 0.99]), rng.randint(1, 40)
    return (
        f"On {month} {day}, {a} ordered {n1} {item1} at ${p1} each for the community fair. "
        f"{b} added {n2} {item2} for ${p2} in total and offered to collect everything on the morning "
        f"of the fair. The organisers asked both to send their receipts by {month} {day + 1}."
    )


def _puzzle(rng: random.Random, lists: dict) -> str:
    """An ordering puzzle with one answer: a hidden ranking of 3-5 people, told as comparisons of
    neighbours in shuffled order, with a question about its ends."""
    n = rng.randint(3, 5)
    names = rng.sample(lists["math_names"], n)  # the ranking, first = most
    more, less, most, least = rng.choice(lists["puzzle_relations"])
    facts = []
    for a, b in zip(names, names[1:]):
        facts.append(f"{a} is {more} {b}." if rng.random() < 0.5 else f"{b} is {less} {a}.")
    rng.shuffle(facts)
    question = rng.choice(
        [f"Who is the {most}?", f"Who is the {least}?", f"Who is the {most}, and who is the {least}?"]
    )
    return " ".join(facts) + " " + question


# Placeholder -> word list of `prompts.json`; `record` and `puzzle` are drawn anew for every prompt.
POOLS = {
    "topic": "chat_subjects",
    "persona": "chat_personas",
    "stem": "chat_stem",
    "humanity": "chat_humanities",
    "topic2": "chat_subjects_2",
    "persona2": "chat_personas_2",
    "stem2": "chat_stem_2",
    "humanity2": "chat_humanities_2",
    "mathidea": "chat_math_ideas",
    "concept": "chat_concepts",
}
DRAWN = {"record": _record, "puzzle": _puzzle}


def chat_prompts(
    lists: dict, draws: int = 30, seed: int = 0, kinds: str = "chat_kinds", suffix: str = ""
) -> list[dict]:
    """Every template of every kind in `lists[kinds]` with `draws` distinct subjects, ids
    `kind<suffix>/template-draw`."""
    rng = random.Random(seed)
    out = []
    for kind, templates in lists[kinds].items():
        for t, template in enumerate(templates):
            names = set(_fields(template))
            fields = sorted(f for f in names if f in POOLS)
            drawn = [(name, draw) for name, draw in DRAWN.items() if name in names]
            # Distinct subjects for each template (a record or puzzle is new at every draw anyway).
            combos = list(itertools.product(*(lists[POOLS[f]] for f in fields))) if fields else [()] * draws
            for n, combo in enumerate(rng.sample(combos, min(draws, len(combos)))):
                values = dict(zip(fields, combo))
                for name, draw in drawn:
                    values[name] = draw(rng, lists)
                out.append({"id": f"{kind}{suffix}/{t}-{n}", "prompt": template.format(**values)})
    return out
