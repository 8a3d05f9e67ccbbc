"""Warnings reported where the user's code called into enzyme_py."""

from __future__ import annotations

import os
import sys
import warnings

__all__ = ["warn_at_user"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__))


def warn_at_user(warning: Warning) -> None:
    """Issue ``warning`` at the first frame outside enzyme_py: the user's call (of
    ``ez.c``, of a derivative, or of a helper built on them), whatever the depth."""
    level, frame = 1, sys._getframe(0)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    warnings.warn(warning, stacklevel=level)
