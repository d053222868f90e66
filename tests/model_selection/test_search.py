"""OfflineSearch in one process: what it chooses, what it records, and its errors."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings

import numpy as np
import pytest

pytest.importorskip("optuna", reason="the search extra is not installed")
pytest.importorskip("pandas", reason="the search extra is not installed")

import optuna  # noqa: E402

import offrl  # noqa: E402
from offrl.algos import DiscreteCQLConfig  # noqa: E402
from offrl.logging import FileAdapterFactory  # noqa: E402
from offrl.model_selection import OfflineSearch, Score  # noqa: E402
from offrl.model_selection.scorers import Scorers, default_fqe_config  # noqa: E402
from offrl.ope import DensityRatioConfig  # noqa: E402

from selection_bandit import BanditEnv, bandit_dataset, learning_rate_score, tiny_dqn  # noqa: E402

SMALL = dict(n_steps=300, n_steps_per_epoch=100, test_size=0.25, show_progress=False)


def _plain_fit(config, dataset, seed, n_steps, n_steps_per_epoch=100):
    offrl.seed(seed)
    algo = config.create()
    algo.fit(dataset, n_steps=n_steps, n_steps_per_epoch=n_steps_per_epoch,
             logger_adapter=offrl.logging.NoopAdapterFactory(), show_progress=False)
    return algo


def test_picks_the_known_best_candidate_and_records_true_returns():
    dataset = bandit_dataset()
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-7, 3e-3]}, scorer="wis", seeds=2, **SMALL)
    search.fit(dataset, env=BanditEnv())
    table = search.results_

    # every (config, seed) trial, every epoch's checkpoint is a candidate
    assert len(table) == 4 * 3
    assert sorted(zip(table["param_learning_rate"], table["seed"])) == sorted(
        [(lr, s) for lr in (1e-7, 3e-3) for s in (0, 1)] * 3)
    assert sorted(table["epoch"].unique()) == [1, 2, 3] and sorted(table["step"].unique()) == [100, 200, 300]
    # the learning configuration wins; its true return beats every non-learning candidate
    chosen = table[table["chosen"]].iloc[0]
    assert search.best_params_["learning_rate"] == 3e-3 and chosen["rank"] == 1
    assert chosen["wis"] == table["wis"].max()
    assert chosen["true_return"] >= 0.8
    assert chosen["true_return"] > table.loc[table["param_learning_rate"] == 1e-7, "true_return"].max()
    assert {"true_value", "wis_lower", "wis_upper", "wis_reliable", "wis_effective_sample_size", "train_time",
            "score_time", "train_loss"} <= set(table.columns)
    assert (table["wis_lower"] <= table["wis"]).all() and (table["wis"] <= table["wis_upper"]).all()
    assert (table["train_time"] > 0).all() and (table["score_time"] > 0).all()
    assert sorted(table["rank"]) == list(range(1, 13))

    # the chosen checkpoint is exactly what a plain fit with its seed gives after its steps: scoring
    # and the environment rollouts leave training's random streams alone
    plain = _plain_fit(tiny_dqn(learning_rate=3e-3), search.train_dataset_, search.best_params_["seed"],
                       search.best_step_)
    x = np.random.default_rng(5).normal(size=(64, 2)).astype(np.float32)
    np.testing.assert_array_equal(search.best_estimator_.predict(x), plain.predict(x))
    np.testing.assert_allclose(search.best_estimator_.predict_value(x, plain.predict(x)),
                               plain.predict_value(x, plain.predict(x)), rtol=1e-6)
    assert search.train_dataset_.size() == 300 and search.test_dataset_.size() == 100
    assert "chosen: trial" in search.leaderboard(3)


def _scorer_from_table(values):
    """A callable scorer returning ``values[learning_rate]`` (a Score)."""
    def scorer(algo, dataset):
        return values[algo.config.learning_rate]
    return scorer


def test_unreliable_candidates_are_never_chosen_over_reliable_ones():
    dataset = bandit_dataset(40)
    values = {1e-4: Score(1.0, 0.5, 1.5, reliable=True), 3e-3: Score(9.0, 8.0, 10.0, reliable=False)}
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-4, 3e-3]}, scorer={"made_up": _scorer_from_table(values)},
                           n_steps=2, n_steps_per_epoch=1, test_size=0.25, show_progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reliable choice: no warning
        search.fit(dataset)
    assert search.best_params_["learning_rate"] == 1e-4
    table = search.results_
    assert table.loc[table["param_learning_rate"] == 3e-3, "reliable"].tolist() == [False, False]
    # every reliable candidate ranks above every unreliable one, whatever their values
    assert table.loc[table["reliable"], "rank"].max() < table.loc[~table["reliable"], "rank"].min()

    # with no reliable candidate, the best unreliable one is chosen, with a warning
    values = {1e-4: Score(1.0, reliable=False), 3e-3: Score(9.0, reliable=False)}
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-4, 3e-3]}, scorer={"made_up": _scorer_from_table(values)},
                           n_steps=2, n_steps_per_epoch=1, test_size=0.25, show_progress=False)
    with pytest.warns(UserWarning, match="no candidate's made_up estimate is reliable"):
        search.fit(dataset)
    assert search.best_params_["learning_rate"] == 3e-3


def test_choose_by_the_lower_confidence_bound():
    dataset = bandit_dataset(40)
    values = {1e-4: Score(1.0, 0.0, 2.0), 3e-3: Score(0.8, 0.7, 0.9)}
    chosen = {}
    for choose_by in ("estimate", "lower"):
        search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-4, 3e-3]}, scorer={"s": _scorer_from_table(values)},
                               choose_by=choose_by, n_steps=1, n_steps_per_epoch=1, test_size=0.25, show_progress=False)
        search.fit(dataset)
        chosen[choose_by] = search.best_params_["learning_rate"]
        assert search.best_score_ == (1.0 if choose_by == "estimate" else 0.7)
    assert chosen == {"estimate": 1e-4, "lower": 3e-3}


def test_by_default_the_lower_bound_chooses_where_the_selecting_scorer_has_an_interval():
    def make(**kwargs):
        return OfflineSearch(tiny_dqn(), {}, n_steps=1, n_steps_per_epoch=1, show_progress=False, **kwargs)

    for scorer in ("fqe", "wpdis", "dr", "mis"):
        assert make(scorer=scorer).choose_by == "lower", scorer
    for scorer in ("init_value", "neg_td_error", learning_rate_score):
        assert make(scorer=scorer).choose_by == "estimate", scorer
    # the selecting scorer decides, not the first one listed
    assert make(scorer=["init_value", "fqe"], select="fqe").choose_by == "lower"
    assert make(scorer=["fqe", "init_value"], select="init_value").choose_by == "estimate"
    # an explicit rule is kept
    assert make(scorer="fqe", choose_by="estimate").choose_by == "estimate"


def test_the_default_fqe_has_three_independent_members():
    dataset = bandit_dataset(40)
    search = OfflineSearch(tiny_dqn(), {}, n_steps=1, n_steps_per_epoch=1, test_size=0.25, show_progress=False)
    _, test = offrl.dataset.train_test_split(dataset, test_size=0.25, random_state=0)
    config = Scorers(search.scorers, test).fqe_config
    assert type(config).__name__ == "DiscreteFQEConfig"
    assert config.n_critics == 3 and config.independent_critics is True
    continuous = default_fqe_config(False, 10000)
    assert type(continuous).__name__ == "FQEConfig"
    assert continuous.n_critics == 3 and continuous.independent_critics is True
    # everything else is recommended()'s, with the weight average's lag held to a tenth of the steps
    expected = offrl.ope.FQEConfig.recommended(ema_decay=0.999, n_critics=3, independent_critics=True)
    assert continuous == expected
    # an explicit fqe_config is used as given
    own = offrl.ope.DiscreteFQEConfig()
    assert Scorers(search.scorers, test, fqe_config=own).fqe_config is own


def test_a_pruner_stops_a_hopeless_trial_after_its_first_checkpoint():
    dataset = bandit_dataset(40)
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-3, 1e-4]}, scorer=learning_rate_score, n_steps=3,
                           n_steps_per_epoch=1, test_size=0.25, show_progress=False,
                           pruner=optuna.pruners.MedianPruner(n_startup_trials=1, n_warmup_steps=0))
    search.fit(dataset)
    table = search.results_
    assert table.groupby("trial")["state"].first().to_dict() == {0: "complete", 1: "pruned"}
    assert table.groupby("trial")["epoch"].max().to_dict() == {0: 3, 1: 1}
    assert search.best_params_["learning_rate"] == 1e-3


def test_refit_retrains_the_chosen_config_on_every_episode():
    dataset = bandit_dataset(80)
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-7, 3e-3]}, scorer="wis", refit=True, n_steps=200,
                           n_steps_per_epoch=100, test_size=0.25, show_progress=False)
    search.fit(dataset)
    assert search.best_params_ == {"learning_rate": 3e-3, "seed": 0}
    plain = _plain_fit(tiny_dqn(learning_rate=3e-3), dataset, 0, search.best_step_)
    x = np.random.default_rng(5).normal(size=(64, 2)).astype(np.float32)
    np.testing.assert_array_equal(search.best_estimator_.predict(x), plain.predict(x))
    assert search.refit_time_ > 0


def test_each_trial_is_logged_as_a_run_with_its_scores(tmp_path):
    dataset = bandit_dataset(80)
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-7, 3e-3]}, scorer=["wis", "neg_td_error"], n_steps=200,
                           n_steps_per_epoch=100, test_size=0.25, show_progress=False,
                           logger_adapter=FileAdapterFactory(str(tmp_path / "runs")))
    search.fit(dataset)
    assert sorted(os.listdir(tmp_path / "runs")) == ["offrl_search_trial0", "offrl_search_trial1"]
    for trial in (0, 1):
        run = tmp_path / "runs" / f"offrl_search_trial{trial}"
        params = json.loads((run / "params.json").read_text())
        assert params["search"] == {"study": "offrl_search", "trial": trial, "seed": 0,
                                    "learning_rate": [1e-7, 3e-3][trial]}
        rows = search.results_[search.results_["trial"] == trial].sort_values("epoch")
        for label in ("wis", "neg_td_error"):
            logged = [float(line.split(",")[2]) for line in (run / f"score_{label}.csv").read_text().splitlines()]
            np.testing.assert_allclose(logged, rows[label].to_numpy(), rtol=1e-12)


def test_every_named_scorer_computes_what_the_ope_functions_give():
    dataset = bandit_dataset(120)
    scorers = ["fqe", "dr", "wpdis", "mis", "init_value", "neg_td_error"]
    search = OfflineSearch(tiny_dqn(learning_rate=3e-3), {}, scorer=scorers, n_steps=100, n_steps_per_epoch=100,
                           test_size=0.25, show_progress=False, fqe_steps=60, fqe_steps_per_epoch=30,
                           ratio_config=DensityRatioConfig(n_steps=30), ope_options={"n_bootstrap": 50})
    with pytest.warns(UserWarning, match="no candidate's fqe estimate is reliable"):
        search.fit(dataset)
    (row,) = search.results_.to_dict("records")
    # FQE has not settled in 60 updates: flagged, and so the candidate is unreliable
    assert row["fqe_converged"] is False and row["converged"] is False and row["reliable"] is False
    assert row["fqe_fqe_steps"] == 60
    assert row["wpdis_effective_sample_size"] > 10 and row["wpdis_reliable"]
    # scoring again under the same seed gives the same figures
    again = Scorers(search.scorers, search.test_dataset_, fqe_steps=60, fqe_steps_per_epoch=30,
                    ratio_config=DensityRatioConfig(n_steps=30), ope_options={"n_bootstrap": 50})
    with offrl._random.seeded(0):
        scores = again.score(search.best_estimator_)
    for label in scorers:
        assert row[label] == pytest.approx(scores[label].value, rel=1e-6), label
    assert math.isnan(row["init_value_lower"]) and row["neg_td_error"] < 0


def test_distributions_are_sampled_by_optuna():
    dataset = bandit_dataset(40)
    space = {"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2, log=True),
             "target_update_interval": [10, 100]}
    search = OfflineSearch(tiny_dqn(), space, scorer=learning_rate_score, n_trials=3, seeds=[7], n_steps=2,
                           n_steps_per_epoch=1, test_size=0.25, show_progress=False)
    search.fit(dataset)
    table = search.results_
    assert table["trial"].nunique() == 3 and (table["seed"] == 7).all()
    assert ((table["param_learning_rate"] >= 1e-4) & (table["param_learning_rate"] <= 1e-2)).all()
    assert set(table["param_target_update_interval"]) <= {10, 100}
    assert search.best_params_["learning_rate"] == table["param_learning_rate"].max()


def test_report_is_one_html_file_with_its_charts(tmp_path):
    import html.parser

    dataset = bandit_dataset(80)
    search = OfflineSearch(tiny_dqn(), {"learning_rate": [1e-7, 3e-3]}, scorer="wis", n_steps=200,
                           n_steps_per_epoch=100, test_size=0.25, show_progress=False)
    search.fit(dataset, env=BanditEnv())
    path = search.write_report(str(tmp_path / "report.html"))
    text = open(path, encoding="utf-8").read()
    tags = []

    class Parser(html.parser.HTMLParser):
        def handle_starttag(self, tag, attrs):
            tags.append((tag, dict(attrs)))

    Parser().feed(text)
    assert sum(tag == "svg" for tag, _ in tags) == 4  # intervals, scores per checkpoint, losses, estimated vs true
    assert not [a for tag, a in tags if tag in ("script", "img", "link")]  # nothing fetched, nothing beside it
    assert "Estimated against true" in text and "regret" in text
    assert f"trial {search.results_.loc[search.best_index_, 'trial']} seed 0 epoch {search.best_epoch_}" in text


# ----------------------------------------------------------------------- bad input
def test_a_field_the_config_lacks_fails_naming_it_before_anything_trains():
    with pytest.raises(ValueError, match=r"search space names 'alphaa', but DiscreteCQLConfig has no field 'alphaa'"):
        OfflineSearch(DiscreteCQLConfig(), {"alphaa": [1.0]})
    with pytest.raises(ValueError, match=r"'encoder_factory.hidden_units'.*has no field 'hidden_units'"):
        OfflineSearch(DiscreteCQLConfig(), {"encoder_factory.hidden_units": [[8]]})  # the default encoder has none
    with pytest.raises(ValueError, match="'seed' is not a config field"):
        OfflineSearch(DiscreteCQLConfig(), {"seed": [1, 2]})


def test_a_value_out_of_range_fails_naming_the_field():
    with pytest.raises(ValueError, match=r"search space 'alpha': alpha must be a finite number >= 0, got -1.0"):
        OfflineSearch(DiscreteCQLConfig(), {"alpha": [1.0, -1.0]})
    with pytest.raises(ValueError, match=r"search space 'gamma': gamma must be in \[0, 1\], got 2.0"):
        OfflineSearch(DiscreteCQLConfig(), {"gamma": optuna.distributions.FloatDistribution(0.9, 2.0)})
    with pytest.raises(ValueError, match=r"search space 'batch_size': batch_size must be a positive int"):
        OfflineSearch(DiscreteCQLConfig(), {"batch_size": optuna.distributions.IntDistribution(0, 64)})
    with pytest.raises(TypeError, match=r"search space 'observation_scaler'"):
        OfflineSearch(DiscreteCQLConfig(), {"observation_scaler": [3]})
    with pytest.raises(ValueError, match="unknown observation_scaler type 'nope'"):
        OfflineSearch(DiscreteCQLConfig(), {"observation_scaler": ["nope"]})


def test_too_few_episodes_says_how_many_there_are_and_were_asked():
    search = OfflineSearch(tiny_dqn(), {}, scorer="wis", test_size=5, show_progress=False)
    with pytest.raises(ValueError, match="the dataset has 4 episodes, and test_size=5 asks to hold out 5"):
        search.fit(bandit_dataset(4))
    search = OfflineSearch(tiny_dqn(), {}, scorer="wis", test_size=0.5, show_progress=False)
    with pytest.raises(ValueError, match="the dataset has 1 episodes, and test_size=0.5 asks to hold out 1"):
        search.fit(bandit_dataset(1))


def test_an_unopenable_storage_is_a_clear_error(tmp_path):
    dataset = bandit_dataset(20)
    for storage, message in ((f"sqlite:///{tmp_path}/missing/study.db", "the directory .* does not exist"),
                             (f"sqlite:///{tmp_path}", "is a directory, not a database file"),
                             ("nosuchdatabase://host/db", "cannot be opened"),
                             ("study.db", "is not a database URL")):
        search = OfflineSearch(tiny_dqn(), {}, scorer="wis", storage=storage, n_steps=1, show_progress=False)
        with pytest.raises(ValueError, match=f"storage '{storage}'.*{message}" if "://" in storage else message):
            search.fit(dataset)


def test_argument_errors():
    config = tiny_dqn()
    cases = [
        (dict(scorer="nope"), ValueError, "scorer 'nope' is not one of"),
        (dict(scorer="init_value", choose_by="lower"), ValueError, "choose_by='lower' needs a scorer with a confidence"),
        (dict(choose_by="best"), ValueError, "choose_by must be one of"),
        (dict(scorer=["wis", "fqe"], select="dr"), ValueError, "select must be one of the scorer labels"),
        (dict(n_trials=3), ValueError, r"n_trials=3, but the grid has 2 trials \(2 configs x 1 seeds\)"),
        (dict(seeds=0), ValueError, "seeds must be a positive int"),
        (dict(seeds=[1, 1]), ValueError, "seeds must be distinct"),
        (dict(test_size=1.5), ValueError, "test_size must be a fraction"),
        (dict(ope_options={"clipp": 3}), ValueError, r"ope_options has \['clipp'\]"),
        (dict(n_jobs=2, storage=optuna.storages.InMemoryStorage()), ValueError, "n_jobs > 1 needs a storage"),
        (dict(logger_adapter=object()), TypeError, "logger_adapter must be a logger adapter factory"),
    ]
    for kwargs, error, message in cases:
        with pytest.raises(error, match=message):
            OfflineSearch(config, {"learning_rate": [1e-3, 1e-4]}, **kwargs)
    with pytest.raises(ValueError, match="n_trials is required"):
        OfflineSearch(config, {"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-3)})
    with pytest.raises(TypeError, match="config must be an algorithm config"):
        OfflineSearch(dataclasses.asdict, {})
    with pytest.raises(ValueError, match="the search has not run"):
        OfflineSearch(config, {}).leaderboard()


def test_a_larger_n_trials_extends_a_stored_study(tmp_path):
    storage = f"sqlite:///{tmp_path}/study.db"
    calls = []

    def score(algo, dataset):
        calls.append(algo.config.learning_rate)
        return 1000.0 * algo.config.learning_rate

    def run(n_trials):
        search = OfflineSearch(tiny_dqn(), {"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-2)},
                               scorer=score, n_trials=n_trials, n_steps=1, test_size=0.25, show_progress=False,
                               storage=storage)
        return search.fit(bandit_dataset(40))

    first = run(2)
    assert len(calls) == 2 and first.results_["trial"].tolist() == [0, 1]
    second = run(3)
    assert len(calls) == 3  # one more trial; the first two are read back, not trained again
    assert second.results_["trial"].tolist() == [0, 1, 2]
    assert second.results_["param_learning_rate"].tolist()[:2] == first.results_["param_learning_rate"].tolist()
