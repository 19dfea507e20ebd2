"""Numerics only: array in, array out. Never imports widgets, Jupyter or the monitor.

One subpackage per method family, each exporting its public classes:

``conformal``
    Split, Mondrian and weighted conformal classification and regression, the scores (LAC,
    APS, RAPS), the finite-sample quantile and adaptive conformal inference (ACI).
``venn_admit``
    Paper 000: the KNN approximation of a network, its localizer, distance bands and
    Venn-ADMIT selective classification.
``regression``
    Paper 001: modular conformal calibration (MCC) of any regressor's output, its scores,
    interpolations and the metrics of predictive distributions.
``selective``
    Paper 002: calibrated selective classification (the S-MMCE selector, its meta features and
    the simulated shifts it is trained on).
``pac``
    Paper 003: PAC confidence sets (exact binomial k*, Gaussian regression sets).
``risk``
    Paper 004: label-free risk estimates of a model's top-k output.
``calibration``
    Post-hoc calibration maps shared by several papers: temperature and Platt scaling,
    histogram binning, isotonic regression.
``shift``
    Shift detectors with false-alarm control: conformal test martingales, CUSUM/Shiryaev-Roberts
    recursions, the coverage-drop betting test and the simpler monitors.
``metrics``
    Shared metrics: exact binomial intervals and (selective) calibration errors.
``knn``
    Exact or approximate nearest neighbours (faiss), used by papers 000 and 002.
"""
