"""A run's console handler: log lines written above the progress bar, each line once.

:class:`ConsoleHandler` is the console handler of a run's logging (``conf/hydra/job_logging``):
a log line (an evaluation, a warning) is written above the progress bar instead of into it.
This module imports neither Lightning nor torch, so ``actorq train`` configures its
logging and refuses a bad value within seconds, before the slow imports.
"""

from __future__ import annotations

import logging

from tqdm import tqdm
from typing_extensions import override

LIGHTNING_LOGGERS = ("lightning", "lightning.pytorch", "lightning.fabric")


class ConsoleHandler(logging.StreamHandler):
    """A ``logging.StreamHandler`` that writes through ``tqdm.write``: an open progress bar
    is cleared, the line written, the bar drawn again below it. Lightning's advertising
    ("💡 Tip: ...") is left out.

    Example:
        >>> record = logging.LogRecord("lightning", logging.INFO, "", 0, "💡 Tip: try X", None, None)
        >>> ConsoleHandler().filter(record)
        False
    """

    ADVERT = "💡 Tip"

    def __init__(self, stream=None):
        super().__init__(stream)
        self.addFilter(no_advert)

    @override
    def emit(self, record: logging.LogRecord) -> None:
        try:
            tqdm.write(self.format(record), file=self.stream)
            self.flush()
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's own contract: report, never raise
            self.handleError(record)


def no_advert(record: logging.LogRecord) -> bool:
    """``False`` for Lightning's advertising ("💡 Tip: ..."), a filter for log handlers."""
    return not str(record.msg).startswith(ConsoleHandler.ADVERT)


def lightning_without_adverts() -> None:
    """Lightning's own console handlers (a run started from Python, where no run logging is
    configured) leave its advertising out too; call it after importing Lightning."""
    for name in LIGHTNING_LOGGERS:
        for handler in logging.getLogger(name).handlers:
            if no_advert not in handler.filters:
                handler.addFilter(no_advert)


def lightning_logs_through_root() -> None:
    """``import lightning`` gives the ``lightning`` logger a console handler of its own, and its
    records reach the root logger's handlers too: with a run's logging configured, every
    Lightning line would be printed twice. This drops Lightning's handlers and lets its records
    propagate to the root logger's; call it after importing Lightning.

    Example:
        >>> import lightning
        >>> root = logging.getLogger()
        >>> root.addHandler(handler := ConsoleHandler())
        >>> lightning_logs_through_root()
        >>> logging.getLogger("lightning").handlers, logging.getLogger("lightning").propagate
        ([], True)
        >>> root.removeHandler(handler)
    """
    if not logging.getLogger().hasHandlers():  # nothing configured: Lightning's own console stays
        return
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        for handler in list(logger.handlers):
            logger.removeHandler(handler)
        logger.propagate = True
