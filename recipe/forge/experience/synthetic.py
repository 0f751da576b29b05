"""Realistic ALFWorld- and WebShop-like observation text for tests and benchmarks (a stand-in for real
rollouts: the sentence templates follow the two environments' observation formats, the content is random).

Everything is drawn from one seeded ``random.Random``, so a seed gives the same corpus on every machine.
"""

from __future__ import annotations

import random

RECEPTACLES = (
    "cabinet", "countertop", "drawer", "shelf", "fridge", "microwave", "sinkbasin", "stoveburner", "garbagecan",
    "coffeemachine", "toaster", "diningtable", "sidetable", "dresser", "bed", "desk", "sofa", "armchair", "safe",
    "bathtubbasin", "toilet", "towelholder", "handtowelholder", "laundryhamper", "ottoman", "tvstand",
)
OBJECTS = (
    "apple", "bread", "butterknife", "mug", "cup", "plate", "bowl", "pan", "pot", "egg", "lettuce", "tomato",
    "potato", "spatula", "ladle", "fork", "spoon", "knife", "saltshaker", "peppershaker", "soapbottle", "sponge",
    "dishsponge", "kettle", "winebottle", "vase", "book", "pen", "pencil", "cellphone", "keychain", "creditcard",
    "remotecontrol", "laptop", "pillow", "cd", "alarmclock", "statue", "watch", "box", "newspaper", "candle",
    "cloth", "towel", "toiletpaper", "spraybottle", "tissuebox", "houseplant", "desklamp", "baseballbat",
)
TASKS = (
    ("pick_and_place", "put a {o} in {r}."),
    ("look_at_obj_in_light", "look at {o} under the desklamp."),
    ("pick_clean_then_place", "put a clean {o} in {r}."),
    ("pick_heat_then_place", "heat some {o} and put it in {r}."),
    ("pick_cool_then_place", "cool some {o} and put it in {r}."),
    ("pick_two_obj_and_place", "find two {o} and put them in {r}."),
)
PRODUCT_WORDS = (
    "men's", "women's", "cotton", "slim", "fit", "long", "sleeve", "shirt", "running", "shoes", "wireless",
    "bluetooth", "headphones", "organic", "green", "tea", "gluten", "free", "snack", "bars", "waterproof",
    "hiking", "boots", "stainless", "steel", "water", "bottle", "leather", "wallet", "phone", "case", "vitamin",
    "gummies", "face", "moisturizer", "hair", "dryer", "yoga", "pants", "high", "waist", "king", "size",
    "pillow", "memory", "foam", "mattress", "topper", "coffee", "beans", "dark", "roast", "protein", "powder",
)
COLORS = ("black", "white", "navy blue", "grey", "red", "pink", "olive green", "beige", "brown", "purple")
SIZES = ("x-small", "small", "medium", "large", "x-large", "xx-large", "7", "8", "9", "10", "11", "12")


def _thing(rng: random.Random, pool: tuple[str, ...]) -> str:
    return f"{rng.choice(pool)} {rng.randint(1, 9)}"


def _listing(items: list[str]) -> str:
    if not items:
        return "nothing"
    if len(items) == 1:
        return f"a {items[0]}"
    return ", ".join(f"a {x}" for x in items[:-1]) + f", and a {items[-1]}"


def alfworld_task(rng: random.Random) -> tuple[str, str]:
    """(task_type, task description)."""
    task_type, template = rng.choice(TASKS)
    return task_type, template.format(o=rng.choice(OBJECTS), r=rng.choice(RECEPTACLES))


def alfworld_observation(rng: random.Random) -> str:
    """One ALFWorld-style observation (arrival, opening, picking, or the initial room description)."""
    kind = rng.random()
    where = _thing(rng, RECEPTACLES)
    contents = [_thing(rng, OBJECTS) for _ in range(rng.randint(0, 5))]
    if kind < 0.45:
        return f"You arrive at {where}. On the {where}, you see {_listing(contents)}."
    if kind < 0.65:
        return f"You open the {where}. The {where} is open. In it, you see {_listing(contents)}."
    if kind < 0.8:
        return f"You arrive at {where}. The {where} is closed."
    if kind < 0.9:
        return f"You pick up the {_thing(rng, OBJECTS)} from the {where}."
    room = [_thing(rng, RECEPTACLES) for _ in range(rng.randint(8, 18))]
    _, task = alfworld_task(rng)
    return (
        "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
        f"you see {_listing(room)}.\n\nYour task is to: {task}"
    )


def webshop_observation(rng: random.Random) -> str:
    """One WebShop-style page (search results or an item page), flattened with [SEP] like the text env."""
    query = " ".join(rng.sample(PRODUCT_WORDS, rng.randint(3, 6)))
    if rng.random() < 0.5:
        results = []
        for _ in range(rng.randint(3, 5)):
            asin = "B0" + "".join(rng.choice("0123456789ABCDEFGHJKLMNPQRSTUVWXYZ") for _ in range(8))
            title = " ".join(rng.sample(PRODUCT_WORDS, rng.randint(4, 8))).title()
            results.append(f"{asin} [SEP] {title} [SEP] ${rng.randint(5, 120)}.{rng.randint(0, 99):02d}")
        return (
            f"Instruction: [SEP] i need {query}, and price lower than {rng.randint(2, 10) * 10}.00 dollars "
            f"[SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] " + " [SEP] ".join(results)
        )
    title = " ".join(rng.sample(PRODUCT_WORDS, rng.randint(5, 9))).title()
    colors = " [SEP] ".join(rng.sample(COLORS, rng.randint(2, 5)))
    sizes = " [SEP] ".join(rng.sample(SIZES, rng.randint(2, 6)))
    return (
        f"Instruction: [SEP] i need {query} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] {colors} "
        f"[SEP] size [SEP] {sizes} [SEP] {title} [SEP] Price: ${rng.randint(5, 120)}.{rng.randint(0, 99):02d} "
        "[SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now"
    )


def observation(rng: random.Random) -> str:
    """An ALFWorld-like observation (70%) or a WebShop-like page (30%)."""
    return alfworld_observation(rng) if rng.random() < 0.7 else webshop_observation(rng)


def corpus(n: int, seed: int = 0) -> list[str]:
    """``n`` observations from one seed (duplicates possible, as in real rollouts)."""
    rng = random.Random(seed)
    return [observation(rng) for _ in range(n)]


def perturb(text: str, rng: random.Random, n_edits: int = 2) -> str:
    """A near-duplicate of ``text``: ``n_edits`` single-digit substitutions (an object or receptacle number
    changes, as between two visits of similar places)."""
    chars = list(text)
    digits = [i for i, c in enumerate(chars) if c.isdigit()]
    for i in rng.sample(digits, min(n_edits, len(digits))):
        chars[i] = str((int(chars[i]) + rng.randint(1, 8)) % 10)
    return "".join(chars)
