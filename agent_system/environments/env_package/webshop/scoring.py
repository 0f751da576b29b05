"""WebShop's purchase score, reimplemented from its published rules (Yao et al., 2022).

score = r_type * (|A| * r_att + |O| * r_opt + 1 * r_price) / (|A| + |O| + 1)

- r_att: share of goal attributes the product has (a product attribute with token-set similarity > 85, or
  the attribute text inside the title / description / features);
- r_opt: share of goal options matched by a chosen option (token-set similarity > 85);
- r_price: 1 when the price is at most the goal's ceiling;
- r_type: 1 when the category matches or more than 20% of the wanted type's words are in the title, else
  0.5; 0.1 when under 10% of them are, 0 when none is. WebShop uses spaCy nouns for the title overlap;
  here the product-type words stand in for them (see docs/integrations.md).
"""

from __future__ import annotations

from rapidfuzz import fuzz

from agent_system.environments.env_package.webshop.catalog import Goal, Product

_STOP = {"a", "an", "and", "the", "for", "with", "of", "in", "to"}


def _words(text: str) -> set[str]:
    return {w for w in text.lower().replace(",", " ").replace("-", " ").split() if w not in _STOP}


def type_reward(product: Product, goal: Goal) -> float:
    wanted = _words(goal.product_type)
    title_score = len(wanted & _words(product.title)) / len(wanted) if wanted else 0.2
    reward = 1.0 if (product.category == goal.category or title_score > 0.2) else 0.5
    if title_score < 0.1:
        reward = 0.1
    if title_score == 0.0:
        reward = 0.0
    return reward


def attribute_reward(product: Product, goal: Goal) -> float:
    if not goal.attributes:
        return 1.0
    text = " ".join([product.title, product.description, *product.features]).lower()
    hits = sum(
        1 for g in goal.attributes
        if any(fuzz.token_set_ratio(p, g) > 85 for p in product.attributes) or g.lower() in text
    )
    return hits / len(goal.attributes)


def option_reward(chosen: dict[str, str], goal: Goal) -> float:
    if not goal.options:
        return 1.0
    picked = list(chosen.values())
    hits = sum(1 for g in goal.options.values() if any(fuzz.token_set_ratio(p, g) > 85 for p in picked))
    return hits / len(goal.options)


def purchase_score(product: Product, chosen: dict[str, str], goal: Goal) -> dict[str, float]:
    """All components and the total score in [0, 1]."""
    r_type = type_reward(product, goal)
    r_att = attribute_reward(product, goal)
    r_opt = option_reward(chosen, goal)
    r_price = 1.0 if product.price <= goal.price_upper else 0.0
    n_att, n_opt = len(goal.attributes), len(goal.options)
    total = r_type * (n_att * r_att + n_opt * r_opt + r_price) / (n_att + n_opt + 1)
    return {"score": total, "r_type": r_type, "r_att": r_att, "r_option": r_opt, "r_price": r_price}
