"""Label-free risk estimates of a model's top-k output (paper 004; ALGORITHMS.md §5)."""

from calwatch.engine.risk.estimator import RiskEstimator

__all__ = ["RiskEstimator"]
