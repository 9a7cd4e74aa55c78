"""The exception types that the command line turns into a one-line message."""


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says what is allowed."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or inf loss, gradient or weight; the message names the learner
    step and the tensor. The run stops with status ``failed``."""
