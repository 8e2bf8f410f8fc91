"""Backtests: replay a single-field intervention on stored rollout evidence before training.

    from evotrainer.backtest import run_backtest, backtest_kind
    figures = run_backtest(backtest_kind(field), records, base_spec, candidate_spec)
"""

from evotrainer.backtest.replay import (
    NotBacktestableError,
    backtest_kind,
    filter_backtest,
    length_backtest,
    rescore,
    reward_backtest,
    run_backtest,
)

__all__ = [
    "NotBacktestableError",
    "backtest_kind",
    "filter_backtest",
    "length_backtest",
    "rescore",
    "reward_backtest",
    "run_backtest",
]
