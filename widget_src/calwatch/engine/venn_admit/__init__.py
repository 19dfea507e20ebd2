"""Venn-ADMIT (paper 000; ALGORITHMS.md §2): calibrated selective classification from a KNN approximation.

The KNN approximation of a network over its embeddings, its localizer, distance bands of
calibration rows and the admission rule, with the paper's comparison methods.

Importing this package loads torch and faiss; ``calwatch.VennAdmit`` loads it on first use.
"""

from calwatch.engine.venn_admit.admit import VennAdmit

__all__ = ["VennAdmit"]
