"""Errors shared by every calibrator of the engine."""


class NotFittedError(RuntimeError):
    """Raised when a calibrator is used before ``fit``."""


__all__ = ["NotFittedError"]
