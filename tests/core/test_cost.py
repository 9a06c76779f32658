"""Measuring what a step costs: fewer rounds on a slow machine, more on a busy one, and a curve
measured busy is not cached."""

import functools
import json

import pytest
from tiny import tiny_model

import pardec.core.cost as cost_module
from pardec.core.cost import StepCost, load_or_measure, measure

SHAPES = 2 * len(cost_module.PENDING) + cost_module.SHORT_PENDING  # plain, D = 4, 2 slots
CONTEXTS = (16, 64)


@pytest.fixture(scope="module")
def tiny():
    return tiny_model("llama")


class Clock:
    """Seconds that pass only in block steps: 10 ms a token fed, times 1 + `busier` x the rounds done
    (a machine that grows busier while it measures), and times `lucky_ar` for the first round's AR
    step (one lucky moment), so that the measurement sees chosen times."""

    def __init__(self, monkeypatch, busier: float = 0.0, lucky_ar: float = 1.0):
        self.now, self.calls, self.busier = 0.0, 0, busier
        real = cost_module.block_step

        def timed(model, cache, pending, blocks, *args, **kwargs):
            self.calls += 1
            slots = sum(len(b.slots) for b in blocks[0]) if blocks else 0
            rounds_done = max(self.calls - 4, 0) // SHAPES  # past a prefill, a block and an AR step untimed
            lucky = lucky_ar if (len(pending[0]), slots, rounds_done) == (1, 0, 0) else 1.0
            self.now += 1e-2 * (len(pending[0]) + slots) * (1 + busier * rounds_done) * lucky
            return real(model, cache, pending, blocks, *args, **kwargs)

        monkeypatch.setattr(cost_module, "block_step", timed)

    def __call__(self) -> float:
        return self.now


def test_a_slow_machine_measures_fewer_rounds_not_for_longer(tiny, monkeypatch):
    """Past its time budget a measurement stops after two rounds per context."""
    model, mask_id = tiny
    clock = Clock(monkeypatch)
    cost = measure(model, mask_id, 4, contexts=CONTEXTS, rounds=4, budget_s=1e9, clock=clock)
    assert clock.calls == 5 + SHAPES * 4 * 2  # a prefill and an AR step per context, a block, the rounds
    assert cost.spread == 0.0
    clock.calls = 0
    cost = measure(model, mask_id, 4, contexts=CONTEXTS, rounds=4, budget_s=0.0, clock=clock)
    assert clock.calls == 5 + SHAPES * 2 * 2
    assert cost.contexts == CONTEXTS
    assert all(cost.seconds(n, 50, 4) >= cost.seconds(n, 50) > 0 for n in (1, 8))


def test_a_busy_machine_measures_up_to_twice_the_rounds_and_its_curve_keeps_the_fastest(tiny, monkeypatch):
    model, mask_id = tiny
    clock = Clock(monkeypatch, busier=0.5)
    cost = measure(model, mask_id, 4, contexts=CONTEXTS, rounds=3, budget_s=1e9, clock=clock)
    assert clock.calls == 5 + SHAPES * 6 * 2  # never settled: twice the 3 rounds per context
    assert cost.spread == pytest.approx(0.5)  # each shape's second time was 1.5x its first
    assert cost.seconds(1, 16) == pytest.approx(1e-2)  # the first, quiet round's
    clock.calls = 0
    measure(model, mask_id, 4, contexts=CONTEXTS, rounds=3, budget_s=0.0, clock=clock)
    assert clock.calls == 5 + SHAPES * 2 * 2  # a busy machine is no reason to overrun the budget


def test_a_curve_measured_busy_plans_its_run_but_is_not_cached(tiny, monkeypatch, tmp_path, capsys):
    model, mask_id = tiny
    for busier, cached in ((0.5, False), (0.0, True)):
        clock = Clock(monkeypatch, busier)
        monkeypatch.setattr(cost_module, "measure", functools.partial(measure, rounds=3, clock=clock))
        cost = load_or_measure(model, mask_id, 4, {"model": "tiny"}, tmp_path)
        assert isinstance(cost, StepCost) and cost.seconds(1, 16) > 0
        files = list((tmp_path / "costs").glob("*.json"))
        assert bool(files) == cached
        assert ("busy" in capsys.readouterr().err) != cached
    assert StepCost.from_json(json.loads(files[0].read_text())) == cost
    again = load_or_measure(model, mask_id, 4, {"model": "tiny"}, tmp_path)
    assert again == cost and "measuring" not in capsys.readouterr().err  # read back, not measured


def test_a_lucky_moment_for_one_shape_does_not_skew_the_curve(tiny, monkeypatch):
    """Each shape is timed against the AR step of its own round: one fast AR step (a moment of a higher
    clock) would make every other shape look 25% dearer if each shape kept its own fastest time."""
    model, mask_id = tiny
    clock = Clock(monkeypatch, lucky_ar=0.8)
    cost = measure(model, mask_id, 4, contexts=CONTEXTS, rounds=3, budget_s=1e9, clock=clock)
    for n in (1, 4, 8):
        assert cost.relative(n, 16) == pytest.approx(n)
        assert cost.relative(n, 16, block=True) == pytest.approx(n + 4)
