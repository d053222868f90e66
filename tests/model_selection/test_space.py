"""Search spaces: grids, distributions, values Optuna cannot store, the JSON form."""

from __future__ import annotations

import itertools
import json

import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")

from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution  # noqa: E402

from offrl.algos import DiscreteCQLConfig, TD3PlusBCConfig  # noqa: E402
from offrl.models import VectorEncoderFactory  # noqa: E402
from offrl.model_selection import SearchSpace, space_from_json  # noqa: E402
from offrl.model_selection.space import _labels, with_params  # noqa: E402
from offrl.preprocessing import MinMaxObservationScaler, StandardObservationScaler  # noqa: E402


def test_a_grid_is_every_combination_times_every_seed():
    space = SearchSpace(DiscreteCQLConfig(), {"alpha": [0.1, 1.0, 4.0], "learning_rate": [1e-4, 1e-3]}, seeds=(0, 1))
    assert space.is_grid and len(space) == 12
    points = space.grid()
    expected = [{"alpha": a, "learning_rate": lr, "seed": s}
                for s in (0, 1) for a, lr in itertools.product([0.1, 1.0, 4.0], [1e-4, 1e-3])]
    assert points == expected
    for point in points:
        config = space.config_for(space.decode(point))
        assert (config.alpha, config.learning_rate) == (point["alpha"], point["learning_rate"])
        assert config.batch_size == DiscreteCQLConfig().batch_size  # the rest is the given config's
    assert SearchSpace(DiscreteCQLConfig(), {}, seeds=(3,)).grid() == [{"seed": 3}]


def test_values_optuna_cannot_store_travel_as_labels_and_come_back():
    encoders = [VectorEncoderFactory([64, 64]), VectorEncoderFactory([256])]
    space = SearchSpace(DiscreteCQLConfig(encoder_factory=VectorEncoderFactory([8])),
                        {"encoder_factory.hidden_units": [[64, 64], [256]], "encoder_factory": encoders,
                         "observation_scaler": ["standard", None, MinMaxObservationScaler()]}, seeds=(0,))
    labels = space.distributions()
    assert labels["encoder_factory.hidden_units"].choices == ("[64, 64]", "[256]")
    assert all(isinstance(c, str) for c in labels["encoder_factory"].choices)
    assert labels["observation_scaler"].choices[:2] == ("standard", None)
    point = space.grid()[-1]
    json.dumps(point)  # what the study stores
    decoded = space.decode(point)
    assert decoded["encoder_factory.hidden_units"] == [256]
    assert decoded["encoder_factory"] is encoders[1]
    assert isinstance(decoded["observation_scaler"], MinMaxObservationScaler)
    config = with_params(DiscreteCQLConfig(), {"observation_scaler": "standard",
                                               "encoder_factory": VectorEncoderFactory([8]),
                                               "encoder_factory.hidden_units": [32]})
    assert isinstance(config.observation_scaler, StandardObservationScaler)
    assert config.encoder_factory.hidden_units == [32]


def test_labels_never_collide_with_string_values():
    labels = _labels("key", [[64], "[64]", "[64] #2", [64, 1]])
    assert labels[1:3] == ("[64]", "[64] #2") and len(set(labels)) == 4 and labels[3] == "[64, 1]"


def test_a_factorys_fields_are_checked_with_each_factory_searched():
    encoders = [VectorEncoderFactory([8]), VectorEncoderFactory([16])]
    space = SearchSpace(DiscreteCQLConfig(), {"encoder_factory": encoders, "encoder_factory.hidden_units": [[4]]},
                        seeds=(0,))  # the default encoder has no hidden_units; the searched ones do
    assert space.config_for(space.decode(space.grid()[1])).encoder_factory.hidden_units == [4]
    with pytest.raises(ValueError, match="has no field 'hidden_units'"):
        SearchSpace(DiscreteCQLConfig(), {"encoder_factory": encoders + [DiscreteCQLConfig().encoder_factory],
                                          "encoder_factory.hidden_units": [[4]]}, seeds=(0,))


def test_distributions_make_a_sampled_space_and_lists_become_choices():
    space = SearchSpace(TD3PlusBCConfig(), {"alpha": FloatDistribution(0.5, 10.0, log=True),
                                            "batch_size": [64, 256]}, seeds=(0, 1))
    assert not space.is_grid
    distributions = space.distributions()
    assert distributions["batch_size"] == CategoricalDistribution([64, 256])
    assert distributions["seed"] == CategoricalDistribution([0, 1])
    with pytest.raises(ValueError, match="not a grid"):
        space.grid()


def test_the_json_form():
    space = space_from_json({"alpha": [0.1, 1.0], "learning_rate": {"low": 1e-5, "high": 1e-3, "log": True},
                             "batch_size": {"low": 32, "high": 256, "step": 32},
                             "target_update_interval": {"low": 100, "high": 1000, "type": "float"},
                             "n_critics": {"choices": [1, 2]}})
    assert space["alpha"] == [0.1, 1.0]
    assert space["learning_rate"] == FloatDistribution(1e-5, 1e-3, log=True)
    assert space["batch_size"] == IntDistribution(32, 256, step=32)
    assert space["target_update_interval"] == FloatDistribution(100.0, 1000.0)
    assert space["n_critics"] == CategoricalDistribution([1, 2])
    for bad, message in (([1], "expected a JSON object"),
                         ({"alpha": 3}, "'alpha' must be a list of values"),
                         ({"alpha": {"low": 1}}, "'alpha' must be a list of values"),
                         ({"alpha": {"low": 1, "high": 2, "type": "complex"}}, "type must be"),
                         ({"alpha": {"low": 2.0, "high": 1.0}}, "'alpha'.*low"),
                         ({"alpha": {"low": 0.0, "high": 1.0, "log": True}}, "'alpha'"),
                         ({"alpha": {"choices": [[1]]}}, "choices must be numbers"),
                         ({"alpha": {"choices": []}}, "non-empty")):
        with pytest.raises(ValueError, match=message):
            space_from_json(bad, "space.json")


def test_bad_spaces_name_the_field():
    config = DiscreteCQLConfig()
    with pytest.raises(ValueError, match="search space 'alpha' has no values"):
        SearchSpace(config, {"alpha": []}, (0,))
    with pytest.raises(TypeError, match="search space 'alpha' must be a list of values or an Optuna distribution"):
        SearchSpace(config, {"alpha": 1.0}, (0,))
    with pytest.raises(ValueError, match="search space keys must be field names"):
        SearchSpace(config, {"encoder_factory..x": [1]}, (0,))
    with pytest.raises(ValueError, match=r"'learning_rate.x', but learning_rate is a float"):
        SearchSpace(config, {"learning_rate.x": [1]}, (0,))
    with pytest.raises(TypeError, match="search_space must be a mapping"):
        SearchSpace(config, [("alpha", [1.0])], (0,))
