"""The attribute-set derivation behind the vllm subject's builder fixture.

Plain Python classes with known ``__init__`` chains: every way an ``__init__``
chain sets an attribute is found, with where it is set, and the completeness
check names each attribute a fixture lacks.
"""

import pytest

from fixtures.subjects.vllm.introspection import IncompleteFixture, check_complete, init_attributes


class Root:
    def __init__(self, a):
        self.root_attr = a
        self._configure(a)

    def _configure(self, a):
        self.configured = a

    def not_called_from_init(self):
        self.never = 1


class Middle(Root):
    def __init__(self, a):
        super().__init__(a)
        me = self
        self.x, (self.y, *self.rest) = 1, (2, 3)
        self.annotated: int = 0
        self.counter = 0
        self.counter += 1
        setattr(self, "via_setattr", 5)  # noqa: B010 - the form under test
        me.alias_is_not_followed = 1

    def _configure(self, a):
        super()._configure(a)
        self.middle_configured = a


class Leaf(Middle):
    def __init__(self):
        super().__init__(1)
        self.leaf_attr = None


class NoInit:
    pass


def test_derives_every_assignment_of_the_init_chain():
    found = init_attributes(Leaf)
    assert found == {
        "leaf_attr": "Leaf.__init__",
        "x": "Middle.__init__",
        "y": "Middle.__init__",
        "rest": "Middle.__init__",
        "annotated": "Middle.__init__",
        "counter": "Middle.__init__",
        "via_setattr": "Middle.__init__",
        "root_attr": "Root.__init__",
        "middle_configured": "Middle._configure",
        "configured": "Root._configure",
    }
    # Checked against the real objects: what __init__ set is exactly what was derived,
    # except what an alias of self set (documented as not followed).
    assert set(vars(Leaf())) == set(found) | {"alias_is_not_followed"}


def test_class_without_init_source_sets_nothing():
    assert init_attributes(NoInit) == {}


def test_completeness_check_names_every_missing_attribute():
    provided = set(init_attributes(Leaf)) - {"x", "middle_configured"}
    with pytest.raises(IncompleteFixture) as info:
        check_complete(Leaf, provided, "Leaf fixture")
    message = str(info.value)
    assert "x  (set in Middle.__init__)" in message
    assert "middle_configured  (set in Middle._configure)" in message
    assert "2 attribute(s)" in message
    assert check_complete(Leaf, set(init_attributes(Leaf)), "Leaf fixture") == init_attributes(Leaf)


class Optional_:
    def __init__(self, fast: bool):
        self.always = 1
        if fast:
            self.kernel = "fast"
            self._setup_fast()
        try:
            self.tried = 1
        except ImportError:
            self.fallback = 1
        for _ in range(0):
            self.looped = 1
        self.also_always = 1 if fast else 2

    def _setup_fast(self):
        self.fast_state = 1


def test_an_attribute_set_only_on_some_paths_is_conditional():
    """Assigned inside a branch, a loop or an except clause (or by a method called from one): a
    construction may rightly leave it unset (the vllm subject's construction check accepts that)."""
    from fixtures.subjects.vllm.introspection import check_constructed, conditional_attributes

    assert set(init_attributes(Optional_)) == {
        "always",
        "kernel",
        "fast_state",
        "tried",
        "fallback",
        "looped",
        "also_always",
    }
    assert conditional_attributes(Optional_) == {"kernel", "fast_state", "fallback", "looped"}
    check_constructed(Optional_(fast=False), "a slow one")  # the branch not taken: nothing missing
    broken = Optional_(fast=True)
    del broken.always
    with pytest.raises(IncompleteFixture, match="always"):
        check_constructed(broken, "one missing what every path sets")
