"""What two or more systems share: experiments and claims, executors, metrics, report, I/O."""

from schedlab.core.errors import (
    BadInputError,
    ConfigError,
    MissingDependencyError,
    MissingServiceError,
    SchedlabError,
    UnknownNameError,
)
from schedlab.core.executors import LocalExecutor, RayExecutor, make_executor
from schedlab.core.experiment import Claim, Figure, Result, register

__all__ = [
    "BadInputError", "Claim", "ConfigError", "Figure", "LocalExecutor", "MissingDependencyError",
    "MissingServiceError", "RayExecutor", "Result", "SchedlabError", "UnknownNameError",
    "make_executor", "register",
]
