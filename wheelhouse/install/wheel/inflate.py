"""The inflater wh install uses: ``wheelhouse.inflate`` (on the ground floor, since ``wh stage``'s RECORD check
inflates every member too), under the name install has always imported it by."""

from __future__ import annotations

from wheelhouse.inflate import BACKENDS, Inflater, available, choose

__all__ = ["Inflater", "BACKENDS", "available", "choose"]
