"""The driver's logger on the way to its hello: ``logging`` is imported when something is first logged.

A sandbox's python3 may not be the version the driver's bytecode is for (then it compiles it), and ``logging`` (with ``traceback``, ``tokenize``, ``string``,
``weakref`` …) is among the largest imports before the hello; nothing is logged there unless it goes wrong.
The modules loaded after the hello use ``logging.getLogger("hangar.driver")``: the same logger.

Standard library only, Python 3.8+.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing is not imported on the way to the hello either (mypy reads this as True)
if TYPE_CHECKING:
    import logging
    from typing import Optional

NAME = "hangar.driver"
FORMAT = "%(asctime)s hangar-driver %(levelname)s %(message)s"

_setup = False  # main(): the process's logging is the driver's (basicConfig) once logging is imported
_logger: Optional[logging.Logger] = None


def set_up_on_first_use() -> None:
    global _setup
    _setup = True


def logger() -> logging.Logger:
    """The driver's logger, importing (and, under ``main``, configuring) ``logging`` the first time."""
    global _logger
    if _logger is None:
        import logging

        if _setup:
            logging.basicConfig(
                level=os.environ.get("HANGAR_DRIVER_LOG", "INFO"), format=FORMAT, stream=sys.stderr
            )
        _logger = logging.getLogger(NAME)
    return _logger


class LazyLog:
    """The part of ``logging.Logger`` the hello path's modules use."""

    def debug(self, msg: str, *args: object) -> None:
        logger().debug(msg, *args)

    def info(self, msg: str, *args: object) -> None:
        logger().info(msg, *args)

    def warning(self, msg: str, *args: object) -> None:
        logger().warning(msg, *args)

    def error(self, msg: str, *args: object) -> None:
        logger().error(msg, *args)

    def exception(self, msg: str, *args: object) -> None:
        logger().exception(msg, *args)


log = LazyLog()
