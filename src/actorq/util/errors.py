"""The exception types that the command line turns into a one-line message."""


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says what is allowed."""


class NonFiniteError(RuntimeError):
    """Training produced a NaN or inf loss, gradient or weight; the message names the learner
    step and the tensor. The run stops with status ``failed``."""


def construct(factory, **kwargs):
    """Calls a factory built from the config; a value it refuses (``ValueError``,
    ``TypeError``) becomes a one-line :class:`ConfigError` naming it."""
    try:
        return factory(**kwargs)
    except ConfigError:
        raise
    except (ValueError, TypeError) as error:
        name = getattr(getattr(factory, "func", factory), "__name__", "?")
        raise ConfigError(f"{name}: {error}") from error
