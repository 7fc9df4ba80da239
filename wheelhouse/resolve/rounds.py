"""resolvelib's resolver with its per-round check remembered.

Each round, resolvelib asks of EVERY criterion whether the current pin still satisfies all its
requirements (``_is_current_pin_satisfying``, twice a round): on vllm's closure that is ~58,000
calls and ~183,000 requirement checks for ~210 rounds, a quarter of an offline resolve's CPU. A
criterion is never changed once made (resolvelib replaces it with a new object when its
requirements change) and ``Provider.is_satisfied_by`` answers by its arguments alone, so the
answer for one (criterion, pin) pair never changes: it is kept, keyed by the pair's identity (the
entry holds both objects, so their ids cannot be reused while it lives).

This leans on two names resolvelib does not document (``Resolution`` and its
``_is_current_pin_satisfying``, ``_build_result``); where they are missing or shaped otherwise,
``make_resolver`` returns resolvelib's own resolver: the same answer, without the memo.
"""

from __future__ import annotations

import inspect
import sys

import resolvelib.resolvers
from resolvelib import Resolver

__all__ = ["make_resolver"]

# resolvelib >= 1.1 is a package (Resolution in resolvers/resolution.py), 1.0 one module: both
# export Resolution from resolvelib.resolvers, and _build_result sits in Resolution's module.
Resolution = getattr(resolvelib.resolvers, "Resolution", None)
_build_result = getattr(sys.modules.get(getattr(Resolution, "__module__", ""), None), "_build_result", None)


def _shaped_as_expected() -> bool:
    if Resolution is None or _build_result is None:
        return False
    check = getattr(Resolution, "_is_current_pin_satisfying", None)
    if check is None:
        return False
    try:
        return list(inspect.signature(check).parameters) == ["self", "name", "criterion"]
    except (TypeError, ValueError):
        return False


if _shaped_as_expected():

    class _Resolution(Resolution):  # type: ignore[misc,valid-type]
        def __init__(self, provider, reporter):
            super().__init__(provider, reporter)
            self._satisfying: dict[tuple[int, int], tuple[object, object, bool]] = {}

        def _is_current_pin_satisfying(self, name, criterion) -> bool:
            pin = self.state.mapping.get(name)
            if pin is None:
                return False
            key = (id(criterion), id(pin))
            hit = self._satisfying.get(key)
            if hit is not None and hit[0] is criterion and hit[1] is pin:
                return hit[2]
            ok = super()._is_current_pin_satisfying(name, criterion)
            self._satisfying[key] = (criterion, pin, ok)
            return ok

    class _Resolver(Resolver):
        def resolve(self, requirements, max_rounds: int = 100):
            state = _Resolution(self.provider, self.reporter).resolve(requirements, max_rounds=max_rounds)
            return _build_result(state)

else:  # pragma: no cover - depends on the installed resolvelib
    _Resolver = Resolver


def make_resolver(provider, reporter) -> Resolver:
    """A resolvelib ``Resolver`` for ``provider`` (with the memo where resolvelib allows it)."""
    return _Resolver(provider, reporter)
