"""The ``bayes`` strategy: GP posterior, acquisition functions, portfolios, search protocol."""
from __future__ import annotations

import numpy as np
import pytest
from scipy.stats import norm
from sklearn.gaussian_process import GaussianProcessRegressor
from sklearn.gaussian_process.kernels import Matern

from pytest_autotune.engine.evaluator import Evaluator
from pytest_autotune.results import FailureKind, Measurement
from pytest_autotune.space import SearchSpace
from pytest_autotune.strategies.base import StrategyError
from pytest_autotune.strategies.registry import make_strategy, validate_strategy_spec
from pytest_autotune.strategies import _acquisition as acq
from pytest_autotune.strategies.bayes import BayesianOptimization, PoolGP
from pytest_autotune.strategies._feasibility import FailureModel
import pytest_autotune.strategies.simple  # noqa: F401  (registers random)

from strategy_fixtures import measured


# -- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def space() -> SearchSpace:
    # constrained 3-D space: 20 x 20 x 6 values, x + y < 34
    return SearchSpace({"x": list(range(20)), "y": list(range(20)), "z": list(range(6))}, ["x + y < 34"])


def bowl(p) -> float:
    """Smooth objective with its optimum (1.0) at x=13, y=4, z=2."""
    return 1.0 + 0.02 * (p["x"] - 13) ** 2 + 0.03 * (p["y"] - 4) ** 2 + 0.1 * (p["z"] - 2) ** 2


def objective(fail=lambda p: False):
    return measured(bowl, fail)


def run(space, budget, seed=0, fail=lambda p: False, **hp):
    strategy = BayesianOptimization(space, seed=seed, **hp)
    history = Evaluator(space, objective(fail), budget=budget).run(strategy)
    return strategy, history


MODES = ["ei", "poi", "lcb", "multi", "advanced_multi"]


# -- the GP ----------------------------------------------------------------------------------------
def test_pool_gp_equals_sklearn_posterior():
    rng = np.random.default_rng(1)
    X = rng.random((200, 3))
    y = np.sin(4 * X).sum(1) + 3.0
    kernel = Matern(length_scale=1.5, nu=1.5, length_scale_bounds="fixed")
    gp = PoolGP(X, kernel, 1e-6, 200)
    gp.add_candidates(np.arange(120))
    train = rng.choice(200, 50, replace=False)
    for r in train[:30]:
        gp.add_observation(int(r), float(y[r]))
    gp.add_candidates(np.setdiff1d(np.arange(120, 200), train))  # candidates joining late
    for r in train[30:]:
        gp.add_observation(int(r), float(y[r]))
    for r in rng.choice(gp.pool[: gp.m], 10, replace=False):  # candidates leaving
        gp.remove(int(r))
    ref = GaussianProcessRegressor(kernel, alpha=1e-6, normalize_y=True, optimizer=None).fit(X[train], y[train])
    pool = gp.pool[: gp.m]
    assert not set(pool.tolist()) & set(train.tolist())
    mu, sd = ref.predict(X[pool], return_std=True)
    mean, std = gp.predict_raw()
    np.testing.assert_allclose(mean, mu, atol=1e-8)
    np.testing.assert_allclose(std, sd, atol=1e-8)
    # rebuilding on a subset is the posterior of that subset
    gp.rebuild(np.arange(10, 50))
    ref = GaussianProcessRegressor(kernel, alpha=1e-6, normalize_y=True, optimizer=None).fit(X[train[10:]],
                                                                                             y[train[10:]])
    mu, sd = ref.predict(X[pool], return_std=True)
    mean, std = gp.predict_raw()
    np.testing.assert_allclose(mean, mu, atol=1e-8)
    np.testing.assert_allclose(std, sd, atol=1e-8)


# -- acquisition functions and formulas -------------------------------------------------------------
def test_acquisition_functions_on_known_numbers():
    mean = np.array([0.0, 1.0, -0.5])
    std = np.array([1.0, 0.5, 0.1])
    f, xi = 0.2, 0.1
    z = (f - xi - mean) / (std + 1e-9)
    ei = (f - xi - mean) * norm.cdf(z) + (std + 1e-9) * norm.pdf(z)
    np.testing.assert_allclose(acq.expected_improvement(mean, std, f, xi), ei, rtol=1e-12)
    np.testing.assert_allclose(acq.probability_of_improvement(mean, std, f, xi), norm.cdf(z), rtol=1e-12)
    np.testing.assert_allclose(acq.lower_confidence_bound(mean, std, 2.0), -(mean - 2.0 * std))
    # the best LCB is the lowest bound: 0 - 2 * 1 = -2 (vs 0 and -0.7)
    assert int(np.argmax(acq.acquisition_scores("lcb", mean, std, f, 2.0))) == 0
    with pytest.raises(ValueError):
        acq.acquisition_scores("ucb", mean, std, f, 1.0)


def test_contextual_variance_formula():
    # lambda = (sigma2 / (mu_s / f_best)) / sigma2_s = (0.5 / (10 / 5)) / 2
    assert acq.contextual_variance(0.5, 2.0, 10.0, 5.0) == pytest.approx(0.125)
    # at the end of the initial sample (sigma2 = sigma2_s) it is f_best / mu_s
    assert acq.contextual_variance(3.0, 3.0, 8.0, 2.0) == pytest.approx(0.25)
    # non-positive objectives: the improvement ratio is dropped
    assert acq.contextual_variance(1.0, 4.0, -3.0, -5.0) == pytest.approx(0.25)
    assert acq.contextual_variance(1.0, 0.0, 3.0, 1.0) == 0.0


def test_discounted_observation_score():
    # dos_t = sum_i o_i d^(t-i): 1 * 0.5^2 + 2 * 0.5 + 3
    assert acq.discounted_observation_score([1.0, 2.0, 3.0], 0.5) == pytest.approx(4.25)
    assert acq.discounted_observation_score([], 0.5) == 0.0
    assert acq.discounted_observation_score([7.0], 0.65) == pytest.approx(7.0)


# -- portfolios on crafted sequences -------------------------------------------------------------------
def test_multi_plan_round_robin_and_duplicates():
    p = acq.MultiPortfolio(("ei", "poi", "lcb"), skip_threshold=3, discount=0.5)
    # distinct suggestions: evaluated in function order
    assert p.plan({0: 10, 1: 11, 2: 12}) == [(10, 0), (11, 1), (12, 2)]
    p.record({10: 1.0, 11: 2.0, 12: 3.0})
    assert p.observations == [[1.0], [2.0], [3.0]]
    assert [list(w) for w in p.windows] == [[0, 0, 0]] * 3
    # poi duplicates ei: evaluated once, both marked, poi gets ei's observation
    assert p.plan({0: 20, 1: 20, 2: 21}) == [(20, 0), (21, 2)]
    p.record({20: 5.0, 21: 6.0})
    assert p.observations == [[1.0, 5.0], [2.0, 5.0], [3.0, 6.0]]
    assert [w[-1] for w in p.windows] == [1, 1, 0]
    assert p.update() == []


def test_multi_skips_the_worse_of_conflicting_functions():
    p = acq.MultiPortfolio(("ei", "poi", "lcb"), skip_threshold=3, discount=0.5)
    # ei and lcb agree every round; poi differs. lcb's own earlier observations are worse.
    p.plan({0: 1, 1: 2, 2: 3})
    p.record({1: 1.0, 2: 1.0, 3: 9.0})
    skipped = []
    for r in range(3):
        c = 100 + 10 * r
        assert p.plan({0: c, 1: c + 1, 2: c}) == [(c, 0), (c + 1, 1)]
        p.record({c: 2.0, c + 1: 2.0})
        skipped += p.update()
        if r < 2:  # windows of length 3 are not yet full of duplicates
            assert skipped == []
    # dos(ei) = 1*.125 + 2*.25 + 2*.5 + 2 < dos(lcb) = 9*.125 + ... : lcb is skipped, ei keeps going
    assert skipped == [2]
    assert p.active == [0, 1]
    assert list(p.windows[0]) == [0, 0, 0]  # the survivor gets a clean slate
    # a single conflicting function is never skipped alone
    q = acq.MultiPortfolio(("ei", "poi"), skip_threshold=1, discount=0.5)
    q.windows[0].append(1)
    assert q.update() == []


def test_advanced_multi_drops_a_consistently_worse_function():
    p = acq.AdvancedMultiPortfolio(("ei", "poi", "lcb"), skip_threshold=3, discount=0.75, required_improvement=0.1)
    events = []
    for _ in range(3):
        p.record(0, 1.0)
        p.record(1, 1.0)
        p.record(2, 2.0)  # twice as slow: more than 10 % above the mean every round
        events.append(p.update())
    assert events[:2] == [None, None]
    assert events[2] == ("drop", 2)
    assert p.active == [0, 1]
    assert p.worse == [0, 0, 0] and p.better == [0, 0, 0]  # marks reset after a drop


def test_advanced_multi_promotes_a_consistently_better_function():
    p = acq.AdvancedMultiPortfolio(("ei", "poi", "lcb"), skip_threshold=3, discount=0.75, required_improvement=0.1)
    events = []
    for _ in range(3):
        p.record(0, 1.0)
        p.record(1, 1.3)
        p.record(2, 1.3)
        events.append(p.update())
    # the mean of the scores is 1.2 w: ei is 17 % better, the others 8 % worse (within the margin, no mark)
    assert events == [None, None, ("promote", 0)]
    assert p.active == [0] and p.single
    assert p.update() is None


def test_advanced_multi_ties_and_within_margin():
    p = acq.AdvancedMultiPortfolio(("ei", "poi"), skip_threshold=2, discount=0.75, required_improvement=0.1)
    for _ in range(5):
        p.record(0, 1.0)
        p.record(1, 1.05)  # within 10 % of the mean: never marked
        assert p.update() is None
    assert p.active == [0, 1]


# -- the search protocol -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", MODES)
def test_proposes_only_unevaluated_valid_rows(space, mode):
    strategy, history = run(space, 60, acquisition=mode)
    assert len(history.records) == 60
    # no proposal was a repeat: every proposal became a new evaluation
    assert len(history.strategy_seconds) == len(history.records)
    rows = [r.row for r in history.records]
    assert len(set(rows)) == len(rows) and min(rows) >= 0
    assert history.best.value < 1.3


@pytest.mark.parametrize("mode", ["ei", "advanced_multi", "multi"])
def test_pruned_candidate_pool_and_training_cap(space, mode):
    # pool smaller than the space (random subset + neighbourhoods), GP rebuilt beyond max_train
    strategy, history = run(space, 150, seed=3, acquisition=mode, max_candidates=300, max_train=40)
    rows = [r.row for r in history.records]
    assert len(history.records) == 150 and len(set(rows)) == 150
    assert len(history.strategy_seconds) == 150
    gp = strategy.gp
    assert strategy.pruned and gp.m <= 300
    pool = set(gp.pool[: gp.m].tolist())
    # the pool never holds evaluated rows (the last evaluation is never reported back: the budget ran out)
    assert not pool & set(rows[:-1])
    assert gp.n <= 40
    assert strategy.rebuilds >= 2  # the capped model was replaced by the background one
    # after the swaps the model is still the exact posterior of its (kept + newer) training points
    ref = GaussianProcessRegressor(gp.kernel, alpha=gp.noise, normalize_y=True, optimizer=None)
    ref.fit(gp.X[gp.train_rows[: gp.n]], gp.w[: gp.n])
    mu, sd = ref.predict(gp.X[gp.pool[: gp.m]], return_std=True)
    mean, std = gp.predict_raw()
    np.testing.assert_allclose(mean, mu, atol=1e-7)
    np.testing.assert_allclose(std, sd, atol=1e-7)
    assert history.best.value < 1.2


def test_failures_never_enter_the_gp(space):
    def fail(p):
        return (p["x"] + p["z"]) % 2 == 1  # half of the space fails

    for mode in ("ei", "advanced_multi"):
        strategy, history = run(space, 80, seed=2, fail=fail, acquisition=mode)
        seen = history.records[:-1]  # the last evaluation is never reported back (the budget ran out)
        failed = {r.row for r in seen if r.value is None}
        valid = {r.row for r in seen if r.value is not None}
        assert failed and valid
        trained = set(strategy.gp.train_rows[: strategy.gp.n].tolist())
        assert trained == valid  # every valid observation, and nothing else
        assert set(strategy.failed_rows) == failed
        assert len(history.records) == 80 and len({r.row for r in history.records}) == 80
        assert history.best.value < 1.3
        if mode == "ei":  # one proposal per model step: the rest is the initial sample
            initial = history.records[: len(history.records) - len(strategy.trace)]
            # failed initial points were replaced until 16 (= 20 % of 80) were valid
            assert sum(r.value is not None for r in initial) == 16 < len(initial)


def test_failure_model_rates_rows_near_failures_higher():
    X = np.linspace(0.0, 1.0, 11)[:, None]
    model = FailureModel(X, Matern(length_scale=0.2, nu=1.5, length_scale_bounds="fixed"))
    for row in (0, 1, 2, 3):
        model.observe(row, failed=False)
    assert model.failure_probability(np.arange(11)) is None  # nothing failed: the search is left as it was
    model.observe(10, failed=True)
    p = model.failure_probability(np.arange(11))
    rate = (1 + 1) / (5 + 2)
    assert np.all((p > 0) & (p < 1))
    assert p[10] > 0.5 > rate > p[0]  # a failure's neighbourhood is likely to fail, the successes' is not
    assert np.all(np.diff(p[1:]) > 0)  # rising from the successes towards the failure
    assert p[6] == pytest.approx(rate, abs=0.15)  # far from both: close to the global rate


@pytest.mark.parametrize("region", ["corner", "band"])
def test_failure_model_steers_away_from_a_failing_region(space, region):
    """Failures never enter the GP, so without the failure model EI keeps proposing a failing region."""
    fail = {"corner": lambda p: p["x"] >= 14 and p["y"] <= 6, "band": lambda p: p["x"] >= 15}[region]
    for mode in ("ei", "lcb"):
        failed, best = {}, {}
        for on in (False, True):
            runs = [run(space, 40, seed=seed, fail=fail, acquisition=mode, failure_model=on)[1] for seed in range(4)]
            failed[on] = np.mean([sum(r.value is None for r in h.records) for h in runs])
            best[on] = np.mean([h.best.value for h in runs])
        # EI is weighted by the chance of running; LCB (which can be negative) is only kept off likely failures
        assert failed[True] < (0.7 if mode == "ei" else 0.9) * failed[False], (mode, failed)
        assert best[True] <= best[False] + 1e-9, (mode, best)


def test_failure_model_changes_nothing_without_failures(space):
    on = run(space, 40, seed=3)[1]
    off = run(space, 40, seed=3, failure_model=False)[1]
    assert [r.row for r in on.records] == [r.row for r in off.records]


LOOP_ORDERS = ["ijk", "ikj", "jik", "jki", "kij", "kji"]
LOOP_SPEED = {"ijk": 3.0, "ikj": 1.0, "jik": 3.2, "jki": 6.0, "kij": 1.1, "kji": 5.5}  # fast in the middle, not ends


def _loop_order_space(categorical: bool):
    space = SearchSpace({"x": list(range(8)), "y": list(range(8)), "order": LOOP_ORDERS if categorical else
                         list(range(6)), "one": [7]})

    def time_of(p):
        order = p["order"] if categorical else LOOP_ORDERS[p["order"]]
        return LOOP_SPEED[order] * (1 + 0.05 * (p["x"] - 3) ** 2 + 0.05 * (p["y"] - 5) ** 2)

    return space, measured(time_of)


def test_unordered_parameters_are_one_hot():
    space, _ = _loop_order_space(categorical=True)
    s = BayesianOptimization(space, seed=0)
    X = s.encode_indices(space.indices)
    assert X.shape == (len(space), 2 + 6)  # x, y ordinal; the loop order one-hot; the constant left out
    same_xy = [space.find({"x": 1, "y": 2, "order": o, "one": 7}) for o in LOOP_ORDERS]
    d = np.linalg.norm(X[same_xy][:, None, :] - X[same_xy][None, :, :], axis=-1)
    assert np.allclose(d[~np.eye(6, dtype=bool)], 1.0)  # every two loop orders equally far, as far as x's ends
    ends = [space.find({"x": 0, "y": 2, "order": "ijk", "one": 7}), space.find({"x": 7, "y": 2, "order": "ijk", "one": 7})]
    assert np.linalg.norm(X[ends[0]] - X[ends[1]]) == pytest.approx(1.0)
    numeric, _ = _loop_order_space(categorical=False)
    assert BayesianOptimization(numeric, seed=0).encode_indices(numeric.indices).shape == (len(numeric), 3)


def test_one_hot_finds_a_fast_loop_order_an_index_encoding_misses():
    """Encoded as an index, the loop order's fast values (positions 1 and 4 of 6) look like a smooth valley."""
    best = {}
    for categorical in (False, True):
        space, objective = _loop_order_space(categorical)
        runs = [Evaluator(space, objective, budget=20).run(BayesianOptimization(space, seed=seed)) for seed in range(10)]
        best[categorical] = np.mean([h.best.value for h in runs])
        assert all(space.find(h.records[0].params) >= 0 for h in runs)  # the design snaps to real configurations
    assert best[True] - 1.0 < 0.5 * (best[False] - 1.0), best


def test_initial_design_starts_at_the_centre(space):
    s = BayesianOptimization(space, seed=4)
    s.budget = 100
    s._setup()
    design = s.initial_design(6)
    assert space.get(design[0]) == {"x": 9, "y": 9, "z": 2}  # the lower middle value of each parameter
    assert len(design) == len(set(design)) == 6
    _, history = run(space, 10, seed=4)
    assert space.get(history.records[0].row) == {"x": 9, "y": 9, "z": 2}
    _, plain = run(space, 10, seed=4, centre_first=False)
    assert space.get(plain.records[0].row) != {"x": 9, "y": 9, "z": 2}


def test_the_centre_of_a_constrained_space_is_the_nearest_valid_configuration():
    tight = SearchSpace({"x": list(range(20)), "y": list(range(20))}, ["x + y < 12"])
    s = BayesianOptimization(tight, seed=0)
    c = tight.get(s.centre())
    assert c["x"] + c["y"] == 11 and c["x"] <= 9 and c["y"] <= 9  # (9, 9) is invalid: a nearest valid one
    # an unordered parameter has no middle: its value is drawn
    space, _ = _loop_order_space(categorical=True)
    orders = {space.get(BayesianOptimization(space, seed=seed).centre())["order"] for seed in range(20)}
    assert len(orders) > 2


def test_exhausts_a_small_space_without_stopping_early():
    small = SearchSpace({"a": [1, 2, 3, 4, 5], "b": [1, 2, 3, 4]}, ["a * b != 6"])
    for mode in MODES:
        def f(p):
            if p["a"] == 2:
                return Measurement.failed(p, FailureKind.COMPILE)
            return Measurement(p, value=float((p["a"] - 4) ** 2 + p["b"]))

        strategy = BayesianOptimization(small, seed=0, acquisition=mode)
        history = Evaluator(small, f, budget=100).run(strategy)
        assert history.stop_reason == "search space exhausted"
        assert len(history.records) == len(small)


def test_reproducible_with_a_seed(space):
    for mode in ("ei", "multi", "advanced_multi"):
        a = [r.row for r in run(space, 40, seed=7, acquisition=mode)[1].records]
        b = [r.row for r in run(space, 40, seed=7, acquisition=mode)[1].records]
        c = [r.row for r in run(space, 40, seed=8, acquisition=mode)[1].records]
        assert a == b
        assert a != c


def test_small_budgets_scale_the_initial_sample_down(space):
    s = BayesianOptimization(space, seed=0)
    for budget, expected in [(10, 2), (12, 3), (50, 10), (100, 20), (1000, 20)]:
        s.budget = budget
        assert s.initial_size() == expected
    s = BayesianOptimization(space, seed=0, initial_samples=5)
    s.budget = 1000
    assert s.initial_size() == 5
    # with a budget of 12, the model proposes from the 4th evaluation on
    strategy, history = run(space, 12, acquisition="ei")
    assert len(strategy.trace) == 12 - 3


def test_multi_starts_round_robin_in_order(space):
    strategy, history = run(space, 30, acquisition="multi")
    assert strategy.trace[0]["functions"] == ("ei", "poi", "lcb")
    strategy, history = run(space, 30, acquisition="advanced_multi", order=["lcb", "ei"])
    assert strategy.trace[0]["functions"] == ("lcb", "ei")


def test_contextual_variance_in_the_search(space):
    strategy, _ = run(space, 60, acquisition="ei")
    lams = [t["lambda"] for t in strategy.trace]
    # right after the initial sample sigma2 = sigma2_s, so lambda = f_best / mu_s
    first = strategy.sorted_values[0]  # (best at the end; the initial one is at least as large)
    assert 0 < lams[0] <= 1.0 and lams[0] >= first / strategy.initial_mean - 1e-12
    assert lams[-1] < lams[0]  # the model grows certain: less exploration
    strategy, _ = run(space, 40, acquisition="ei", contextual_variance=False, exploration=0.3)
    assert {t["lambda"] for t in strategy.trace} == {0.3}


def test_log_normalisation_falls_back_on_non_positive_values(space):
    def shifted(params):
        return Measurement(params, value=bowl(params) - 1.5)  # negative near the optimum

    strategy = BayesianOptimization(space, seed=0, normalize_y="log", acquisition="ei")
    history = Evaluator(space, shifted, budget=50).run(strategy)
    assert len(history.records) == 50
    assert not strategy.log_outputs
    gp = strategy.gp
    np.testing.assert_allclose(gp.w[: gp.n], [strategy.observed_values[int(r)] for r in gp.train_rows[: gp.n]])


def _mean_best(spec, space, budget, seeds):
    out = []
    for seed in seeds:
        strategy = make_strategy(spec, space, seed=seed)
        out.append(Evaluator(space, objective(), budget=budget).run(strategy).best.value)
    return float(np.mean(out))


@pytest.mark.parametrize("mode", ["ei", "advanced_multi"])
def test_beats_random_on_a_smooth_objective(space, mode):
    seeds = range(6)
    bo = _mean_best({"name": "bayes", "acquisition": mode}, space, 40, seeds)
    rnd = _mean_best("random", space, 40, seeds)
    # excess over the optimum (1.0): the model gets much closer than random sampling
    assert bo - 1.0 < 0.5 * (rnd - 1.0), (bo, rnd)


# -- hyperparameters --------------------------------------------------------------------------------
@pytest.mark.parametrize("field,value", [
    ("acquisition", "ucb"), ("contextual_variance", 1), ("exploration", -0.1), ("lengthscale", 0.0),
    ("nu", -1.0), ("noise", 0.0), ("normalize_y", "minmax"), ("initial_samples", 0), ("initial_fraction", 1.5),
    ("order", ["ei", "ei"]), ("order", []), ("order", ["ucb"]), ("skip_threshold", 0),
    ("required_improvement", 1.0), ("discount", 0.0), ("max_candidates", 4), ("neighbourhood", -1),
    ("max_train", 2), ("initial_samples", 2.5), ("exploration", float("nan")), ("cv_statistic", "var"),
    ("failure_model", 1), ("failure_lengthscale", 0.0), ("failure_lengthscale", None), ("centre_first", "yes"),
])
def test_hyperparameter_validation_names_the_field(space, field, value):
    with pytest.raises(StrategyError, match=repr(field)):
        BayesianOptimization(space, **{field: value})
    with pytest.raises(StrategyError, match=repr(field)):
        validate_strategy_spec({"name": "bayes", field: value})


def test_defaults_and_derived_settings(space):
    s = BayesianOptimization(space)
    assert s.hp.nu == 1.5 and s.hp.skip_threshold == 5 and s.hp.required_improvement == 0.1
    assert tuple(s.hp.order) == ("ei", "poi", "lcb") and s.hp.contextual_variance
    assert s.lengthscale == 1.5 and BayesianOptimization(space, contextual_variance=False).lengthscale == 2.0
    assert BayesianOptimization(space, acquisition="multi").discount == 0.65
    assert BayesianOptimization(space, acquisition="advanced_multi").discount == 0.75
    assert BayesianOptimization(space, discount=0.9).discount == 0.9
    with pytest.raises(StrategyError, match="no hyperparameter"):
        BayesianOptimization(space, kappa=2.0)
