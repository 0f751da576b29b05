"""WebShop: the purchase score against hand-worked numbers and invariants, the built-in shop's pages and
actions, the scripted shopper, and the manager's action legality."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agent_system.environments.env_package.webshop.catalog import Goal, Product, generate_catalog, generate_goal
from agent_system.environments.env_package.webshop.scoring import purchase_score
from agent_system.environments.env_package.webshop.shop import PAGE_SIZE, BuiltinShopTextEnv

pytestmark = pytest.mark.timeout(120)

SHOE = Product("B000000001", "Acme pro running shoes, breathable, non slip", "shoes › running", "running shoes",
               ["breathable", "non slip"], {"size": ["8", "9"], "color": ["black", "red"]}, 50.0, "Light shoes.", ["Breathable"])


def goal(**kw):
    base = dict(asin="B000000001", instruction="", product_type="running shoes", category="shoes › running",
                attributes=["breathable", "non slip"], options={"size": "9", "color": "red"}, price_upper=60.0, query="")
    base.update(kw)
    return Goal(**base)


def test_perfect_purchase_scores_one():
    assert purchase_score(SHOE, {"size": "9", "color": "red"}, goal())["score"] == 1.0


def test_hand_worked_partial_scores():
    # one of two options right: (2*1 + 2*0.5 + 1) / 5
    assert purchase_score(SHOE, {"size": "9", "color": "black"}, goal())["score"] == pytest.approx(0.8)
    # over budget, one attribute missing (and not in the text): (2*0.5 + 2*1 + 0) / 5
    r = purchase_score(SHOE, {"size": "9", "color": "red"}, goal(price_upper=40.0, attributes=["breathable", "waterproof"]))
    assert (r["r_att"], r["r_price"], r["score"]) == (0.5, 0.0, pytest.approx(0.6))
    # an attribute found only in the title text still counts
    assert purchase_score(SHOE, {"size": "9", "color": "red"}, goal(attributes=["pro running"]))["r_att"] == 1.0


def test_type_reward_levels():
    assert purchase_score(SHOE, {}, goal(product_type="running shoes", category="other"))["r_type"] == 1.0
    assert purchase_score(SHOE, {}, goal(product_type="shoes wallet hat bag cap", category="other"))["r_type"] == 0.5
    assert purchase_score(SHOE, {}, goal(product_type="green tea", category="grocery › tea"))["r_type"] == 0.0
    assert purchase_score(SHOE, {"size": "9", "color": "red"}, goal(product_type="green tea"))["score"] == 0.0


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 10_000), st.dictionaries(st.sampled_from(["size", "color", "flavor"]), st.sampled_from(["9", "red", "mint", "small"])))
def test_score_is_a_fraction(goal_index, chosen):
    products = generate_catalog(30, seed=1)
    g = generate_goal(products, goal_index, seed=1)
    for p in products[:5]:
        r = purchase_score(p, chosen, g)
        assert 0.0 <= r["score"] <= 1.0
        assert r["score"] <= r["r_type"] + 1e-12


def test_goals_come_from_their_product():
    products = generate_catalog(40)
    for k in range(40):
        g = generate_goal(products, k)
        p = next(p for p in products if p.asin == g.asin)
        assert set(g.attributes) <= set(p.attributes) and all(v in p.options[t] for t, v in g.options.items())
        assert p.price <= g.price_upper and str(int(g.price_upper)) in g.instruction
    assert generate_goal(products, 7) == generate_goal(products, 7)


def test_pages_and_actions():
    shop = BuiltinShopTextEnv(num_products=120)
    obs, _ = shop.reset(session=3)
    assert obs.startswith("WebShop [SEP] Instruction: [SEP] ") and obs.endswith("Search")
    assert shop.get_available_actions() == {"has_search_bar": True, "clickables": ["search"]}
    same, reward, done, info = shop.step("click[buy now]")
    assert (same, reward, done, info["valid"]) == (obs, 0.0, False, False)
    obs, _, _, _ = shop.step("search[shoes]")
    clickables = shop.get_available_actions()["clickables"]
    asins = [c for c in clickables if c.startswith("b0")]
    assert 0 < len(asins) <= PAGE_SIZE and "Page 1 (Total results:" in obs
    if "next >" in clickables:
        shop.step("click[next >]")
        assert "< prev" in shop.get_available_actions()["clickables"] and "Page 2" in shop.observation()
        shop.step("click[< prev]")
    shop.step(f"click[{asins[0].upper()}]")  # clicks are case-insensitive
    item = shop.get_available_actions()["clickables"]
    assert {"buy now", "description", "features", "reviews", "< prev"} <= set(item)
    shop.step("click[features]")
    assert "Available" in shop.observation()
    shop.step("click[< prev]")
    assert "Buy Now" in shop.observation()
    _, reward, done, info = shop.step("click[buy now]")
    assert done and reward == info["purchase"]["score"]


def test_scripted_shopper_buys_the_right_thing():
    shop = BuiltinShopTextEnv(num_products=200)
    for session in range(60):
        shop.reset(session=session)
        for _ in range(15):
            _, reward, done, _ = shop.step(shop.expert_action())
            if done:
                break
        assert done and reward == 1.0, session


def test_manager_action_legality():
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.webshop.manager import WebshopEnvironmentManager

    envs = WebshopEnvironmentManager(env_config_from_mapping({"env_name": "webshop", "rollout": {"n": 2}}), num_tasks=2, split="train")
    _, infos = envs.reset([0, 1])
    assert envs.parse_action("search[red shoes]", infos[0]) == ("search[red shoes]", True)
    assert envs.parse_action("click[buy now]", infos[0])[1] is False
    _, _, _, infos = envs.step(["<action>search[tea]</action>", "<action>click[tea]</action>", "<action>search[]</action>", "no action"])
    assert [i["is_action_valid"] for i in infos] == [True, False, False, False]
    assert envs.parse_action("search[tea]", infos[0])[1] is False  # no search bar on a results page
    first = next(a for a in infos[0]["admissible_actions"] if a.startswith("click[b0"))
    assert envs.parse_action(first.upper(), infos[0]) == (first, True)
    while envs.active.any():
        envs.step([f"<action>{a}</action>" if a else "" for a in envs.expert_actions(range(4))])
    assert envs.success_evaluator()["success"].all()
    assert all(i["task_score"] == 1.0 for i in envs.last_info)


def test_rollout_logs_the_purchase_score_as_task_score():
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.webshop.manager import WebshopEnvironmentManager
    from agent_system.multi_turn_rollout.protocols import SamplingParams
    from agent_system.multi_turn_rollout.rollout_loop import TrajectoryCollector
    from agent_system.testing.policies import ExpertGenerator, GarbageGenerator

    envs = WebshopEnvironmentManager(env_config_from_mapping({"env_name": "webshop", "rollout": {"n": 2}}), num_tasks=2, split="train")
    expert = TrajectoryCollector().collect(envs, ExpertGenerator(envs), SamplingParams(), seeds=[3, 4])
    assert expert.metrics["task_score/mean"] == 1.0 and expert.metrics["success_rate"] == 1.0
    garbage = TrajectoryCollector().collect(envs, GarbageGenerator(), SamplingParams(), seeds=[3, 4])
    assert garbage.metrics["task_score/mean"] == 0.0 and garbage.metrics["success_rate"] == 0.0


def test_validation_goals_ask_for_held_out_products():
    from agent_system.environments.config import env_config_from_mapping
    from agent_system.environments.env_package.webshop.manager import WebshopEnvironmentManager

    def goal_asins(shop, sessions):
        asins = set()
        for s in sessions:
            shop.reset(session=s)
            asins.add(shop.goal.asin)
        return asins

    train = goal_asins(BuiltinShopTextEnv(num_products=200, split="train"), range(1000))
    val = goal_asins(BuiltinShopTextEnv(num_products=200, split="val"), range(10_000, 10_400))
    assert len(train) == 160 and len(val) == 40 and not train & val  # 20% of the products, never a training goal
    # the validation manager's episodes are drawn from the held-out products, and the shop still sells everything
    config = env_config_from_mapping({"env_name": "webshop", "rollout": {"n": 2}})
    envs = WebshopEnvironmentManager(config, num_tasks=3, split="val")
    envs.reset()
    assert {env.shop.goal.asin for env in envs.pool.envs} <= val
    assert len(envs.pool.envs[0].shop.products) == 200
    while envs.active.any():
        envs.step([f"<action>{a}</action>" if a else "" for a in envs.expert_actions(range(envs.num_envs))])
    assert envs.success_evaluator()["success"].all()
    with pytest.raises(ValueError, match="at least 5 products"):
        BuiltinShopTextEnv(num_products=3)
