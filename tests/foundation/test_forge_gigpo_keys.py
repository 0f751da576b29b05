"""algorithm.forge.enable_similarity / similarity_thresh: GiGPO's keys, which forge never reads, are refused when
set, so that nobody believes they changed forge's step groups."""

import pytest

from recipe.forge.config_rules import ConfigError, ForgeValues


def test_their_defaults_pass_and_are_kept_as_given():
    values = ForgeValues(enable_similarity=False, similarity_thresh=0.95)
    assert (values.enable_similarity, values.similarity_thresh) == (False, 0.95)
    assert values.step_groups == "cluster"  # forge's groups are set by its own keys


@pytest.mark.parametrize("keys", [{"enable_similarity": True}, {"similarity_thresh": 0.9},
                                  {"enable_similarity": True, "similarity_thresh": 0.8}])
def test_setting_them_is_refused_pointing_at_the_keys_that_do_it(keys):
    with pytest.raises(ConfigError) as error:
        ForgeValues(**keys)
    message = str(error.value)
    assert "algorithm.forge.enable_similarity" in message and "obs_similarity_threshold" in message
    assert "algorithm.gigpo.enable_similarity" in message
