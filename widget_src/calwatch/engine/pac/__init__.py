"""PAC confidence sets (paper 003; ALGORITHMS.md §4): binomial k*, temperature, Gaussian sets."""

from calwatch.engine.pac.sets import PACConfidenceSets, PACGaussianRegression, PACInfeasibleError

__all__ = ["PACConfidenceSets", "PACGaussianRegression", "PACInfeasibleError"]
