"""The built-in shop's generated catalogue and shopping goals (deterministic by seed).

A product has an ASIN, a title, a category path, a product type (the noun its title ends on), attributes
("gluten free"), options per option type ({"size": ["small", ...], "color": [...]}), a price and text for
its Description / Features pages. A goal is drawn from one product, as WebShop's are: some of its
attributes, one value per option type, and a price ceiling above its price; the instruction is written
from those. This is a stand-in for WebShop's 1.18 M scraped Amazon products, not a copy of them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# category -> (product nouns, attributes, option types -> values, price range)
CATEGORIES: dict[str, tuple[list[str], list[str], dict[str, list[str]], tuple[float, float]]] = {
    "beauty › hair care": (["shampoo", "conditioner", "hair oil", "hair mask"],
                           ["sulfate free", "paraben free", "for dry hair", "natural ingredients", "long lasting"],
                           {"size": ["8 fl oz", "16 fl oz", "32 fl oz"], "scent": ["lavender", "coconut", "unscented", "citrus"]}, (6, 40)),
    "grocery › snacks": (["protein bar", "trail mix", "granola", "beef jerky", "rice crackers"],
                         ["gluten free", "low sugar", "high protein", "keto friendly", "non gmo", "vegan"],
                         {"flavor": ["chocolate", "peanut butter", "sea salt", "honey", "berry"], "pack size": ["6 count", "12 count", "24 count"]}, (4, 35)),
    "grocery › tea": (["green tea", "herbal tea", "black tea", "matcha powder"],
                      ["organic", "caffeine free", "individually wrapped", "non gmo"],
                      {"flavor": ["mint", "jasmine", "ginger", "earl grey"], "pack size": ["20 bags", "50 bags", "100 bags"]}, (5, 30)),
    "clothing › men": (["t-shirt", "hoodie", "jogger pants", "polo shirt"],
                       ["machine wash", "cotton", "slim fit", "moisture wicking", "long sleeve"],
                       {"size": ["small", "medium", "large", "x-large"], "color": ["black", "navy", "heather grey", "olive"]}, (12, 60)),
    "clothing › women": (["yoga leggings", "sundress", "cardigan", "tank top"],
                         ["high waist", "machine wash", "soft fabric", "quick drying"],
                         {"size": ["x-small", "small", "medium", "large"], "color": ["black", "burgundy", "sky blue", "white"]}, (14, 70)),
    "electronics › audio": (["wireless earbuds", "bluetooth speaker", "headphones", "soundbar"],
                            ["noise cancelling", "water resistant", "long battery life", "fast charging"],
                            {"color": ["black", "white", "blue"]}, (20, 200)),
    "home › candles": (["scented candle", "soy candle", "tea light candles"],
                       ["long lasting", "natural ingredients", "lead free wick", "gift set"],
                       {"scent": ["vanilla", "sandalwood", "fresh linen", "pumpkin spice"], "size": ["small", "medium", "large"]}, (8, 45)),
    "home › kitchen": (["water bottle", "coffee mug", "food storage container", "cutting board"],
                       ["bpa free", "dishwasher safe", "easy clean", "leak proof", "stainless steel"],
                       {"color": ["black", "white", "green", "pink"], "size": ["12 oz", "20 oz", "32 oz"]}, (7, 50)),
    "shoes › running": (["running shoes", "trail sneakers", "walking shoes"],
                        ["non slip", "breathable", "lightweight", "rubber sole", "arch support"],
                        {"size": ["7", "8", "9", "10", "11"], "color": ["black", "white", "grey", "red"]}, (30, 140)),
}
BRANDS = ["Acme", "Northwind", "Bluepeak", "Solace", "Verdant", "Kestrel", "Lumina", "Orchard", "Tidewater", "Everhart", "Quillon", "Brightline"]
ADJECTIVES = ["premium", "classic", "everyday", "deluxe", "essential", "ultra", "pro", "original"]


@dataclass
class Product:
    asin: str
    title: str
    category: str
    product_type: str
    attributes: list[str]
    options: dict[str, list[str]]
    price: float
    description: str
    features: list[str]


@dataclass
class Goal:
    asin: str  # the product the goal was drawn from
    instruction: str
    product_type: str
    category: str
    attributes: list[str]
    options: dict[str, str]  # option type -> wanted value
    price_upper: float
    query: str  # what the scripted shopper types


def _asin(rng: random.Random, taken: set[str]) -> str:
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    while True:
        asin = "B0" + "".join(rng.choice(alphabet) for _ in range(8))
        if asin not in taken:
            taken.add(asin)
            return asin


def generate_catalog(num_products: int, seed: int = 0) -> list[Product]:
    rng = random.Random(f"webshop-catalog:{seed}")
    taken: set[str] = set()
    categories = sorted(CATEGORIES)
    products = []
    for k in range(num_products):
        category = categories[k % len(categories)]
        nouns, attributes, option_types, (low, high) = CATEGORIES[category]
        noun = rng.choice(nouns)
        attrs = rng.sample(attributes, rng.randint(2, min(4, len(attributes))))
        options = {t: sorted(rng.sample(values, rng.randint(2, len(values)))) for t, values in option_types.items()}
        brand = rng.choice(BRANDS)
        title = f"{brand} {rng.choice(ADJECTIVES)} {noun}, {', '.join(attrs)}"
        price = round(rng.uniform(low, high), 2)
        description = f"The {brand} {noun} is {attrs[0]} and {attrs[1]}. Made for everyday use by {brand}."
        features = [f"{a.capitalize()}" for a in attrs] + [f"Available {t}: {', '.join(v)}" for t, v in options.items()]
        products.append(Product(_asin(rng, taken), title, category, noun, attrs, options, price, description, features))
    return products


def generate_goal(products: list[Product], index: int, seed: int = 0) -> Goal:
    """Goal number ``index`` (any non-negative int): drawn from product ``index mod len(products)``."""
    rng = random.Random(f"webshop-goal:{seed}:{index}")
    p = products[index % len(products)]
    attrs = rng.sample(p.attributes, rng.randint(1, min(2, len(p.attributes))))
    options = {t: rng.choice(v) for t, v in p.options.items()}
    price_upper = float(int(p.price * rng.uniform(1.1, 1.6)) + 1)
    option_text = ", and ".join(f"{t}: {v}" for t, v in options.items())
    instruction = f"i need {', '.join(attrs)} {p.product_type} with {option_text}, and price lower than {price_upper:.2f} dollars"
    query = f"{' '.join(attrs)} {p.product_type}"
    return Goal(p.asin, instruction, p.product_type, p.category, attrs, options, price_upper, query)
