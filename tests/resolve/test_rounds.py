"""The resolver with its per-round check remembered (wheelhouse.resolve.rounds) gives resolvelib's
own answers, backtracking included, while asking the provider far less."""

from __future__ import annotations

import random

import pytest
from resolvelib import AbstractProvider, BaseReporter, Resolver
from resolvelib.resolvers import ResolutionImpossible

from wheelhouse.resolve.rounds import _Resolver, make_resolver


class _Index(AbstractProvider):
    """An in-memory index: {name: {version: [(dep, allowed versions)]}}; counts is_satisfied_by."""

    def __init__(self, projects):
        self.projects = projects
        self.asked = 0

    def identify(self, requirement_or_candidate):
        return requirement_or_candidate[0]

    def get_preference(self, identifier, resolutions, candidates, information, backtrack_causes):
        return identifier

    def find_matches(self, identifier, requirements, incompatibilities):
        bad = {c[1] for c in incompatibilities[identifier]}
        allowed = set(self.projects[identifier])
        for _, versions in requirements[identifier]:
            allowed &= set(versions)
        return [(identifier, v) for v in sorted(allowed - bad, reverse=True)]

    def is_satisfied_by(self, requirement, candidate):
        self.asked += 1
        return candidate[1] in requirement[1]

    def get_dependencies(self, candidate):
        name, version = candidate
        return [(dep, tuple(vs)) for dep, vs in self.projects[name][version]]


def _backtracking_index():
    # a 3 needs c 3, whose d 9 does not exist: a backtrack
    return {
        "root": {1: [("a", (1, 2, 3)), ("b", (1, 2))]},
        "a": {3: [("c", (3,))], 2: [("c", (2,))], 1: [("c", (1,))]},
        "b": {2: [("a", (1, 2)), ("e", (1,))], 1: [("a", (1,))]},
        "c": {3: [("d", (9,))], 2: [("d", (1,))], 1: []},
        "d": {1: []},
        "e": {1: [("c", (1, 2))]},
    }


def _random_index(seed: int, n: int = 25):
    rng = random.Random(seed)
    names = [f"p{i}" for i in range(n)]
    projects = {"root": {1: [(names[0], (1, 2, 3)), (names[1], (1, 2, 3))]}}
    for i, name in enumerate(names):
        projects[name] = {}
        for v in (1, 2, 3):
            deps = []
            for other in rng.sample(names[i + 1:], min(len(names) - i - 1, rng.randint(0, 3))):
                deps.append((other, tuple(sorted(rng.sample((1, 2, 3), rng.randint(1, 3))))))
            projects[name][v] = deps
    return projects


def _solve(resolver_cls, projects):
    provider = _Index(projects)
    try:
        result = resolver_cls(provider, BaseReporter()).resolve([("root", (1,))], max_rounds=2000)
    except ResolutionImpossible:
        return None, provider.asked
    return dict(result.mapping), provider.asked


def test_make_resolver_uses_the_memo_with_this_resolvelib():
    assert type(make_resolver(_Index({}), BaseReporter())) is _Resolver and _Resolver is not Resolver


@pytest.mark.parametrize("seed", [None, *range(12)])
def test_same_answers_as_resolvelib(seed):
    projects = _backtracking_index() if seed is None else _random_index(seed)
    theirs, asked_theirs = _solve(Resolver, projects)
    ours, asked_ours = _solve(_Resolver, projects)
    assert ours == theirs
    if seed is None:
        # a 3 -> c 3 -> d 9 (none): backtracked to a 2 -> c 2 -> d 1; b 2 -> e 1 -> c <= 2 agrees
        assert ours == {"root": ("root", 1), "a": ("a", 2), "b": ("b", 2), "c": ("c", 2), "d": ("d", 1), "e": ("e", 1)}
    assert asked_ours <= asked_theirs
    if seed is None:
        assert asked_ours < asked_theirs / 2, "the provider is asked far less"
