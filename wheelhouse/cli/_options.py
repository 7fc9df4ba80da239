"""Option types shared by wh's commands."""

from __future__ import annotations

import math

import click

__all__ = ["FiniteFloatRange"]


class FiniteFloatRange(click.FloatRange):
    """click's FloatRange, refusing nan and inf: every comparison with nan is false, so a range lets it through
    (`wh serve --timeout nan` waited for ever), and no deadline or socket timeout can use inf."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
