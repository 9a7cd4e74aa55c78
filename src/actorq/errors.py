"""The one exception type that the command line turns into a one-line message."""


class ConfigError(ValueError):
    """A configuration value that cannot work; the message says what is allowed."""
